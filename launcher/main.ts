// Entry of the per-VM launcher process. The node agent starts one per VM
// (spawn.ts) in its own session; the launcher outlives agent restarts and
// exits after Shutdown or Kill, on SIGTERM, or when libvirtd dies.
//
// Start-up order matters: the cgroup first (so libvirtd and QEMU are born in
// it), then the private libvirtd, then the gRPC socket last, so an accepting
// socket means the launcher is ready.
import { chmod, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { pino, type Logger } from 'pino';
import { probeHostCaps } from '../vmm/probe/virtualization.js';
import { parseLauncherArgs, type LauncherArgs } from './args.js';
import { Cgroup } from './cgroup.js';
import { ConsoleLog } from './console/log-file.js';
import { DomainDriver } from './domain-driver.js';
import { existingEntries, planFilesystemView, realViewInputs } from './filesystem-view.js';
import { describeExit, qemuIdentity, startPrivateLibvirtd, type PrivateLibvirtd } from './libvirtd.js';
import { createLauncherServer, type LauncherServer } from './server.js';
import { isLauncherAlive, processStartTicks, readStateFile, STATE_FILE_NAME, writeStateFile, type StateFile } from './state.js';
import { bindVmm } from './vmm.js';
import { MigrationSource } from './migration-source.js';
import { MigrationTarget } from './migration-target.js';
import { DEFAULT_GRACE_PERIOD_S, VmManager } from './vm-manager.js';
import { qemuSocketDir } from './qemu-sockets.js';
import { lossyLogDestination } from './log-destination.js';
import { loadedCodeCache } from './code-cache.js';
import { Phases } from './phases.js';

/** Refuses to start twice for one run dir: the first launcher owns the VM. */
async function assertNotRunning(stateFile: string): Promise<void> {
  const previous = await readStateFile(stateFile).catch(() => undefined);
  if (previous && (await isLauncherAlive(previous))) throw new Error(`launcher pid ${previous.pid} already runs for ${previous.uid}`);
}

function bind(server: grpc.Server, socket: string): Promise<void> {
  return new Promise((resolve, reject) =>
    server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );
}

async function run(args: LauncherArgs, log: Logger): Promise<void> {
  const t0 = performance.now();
  // Since the process started: the bench adds Node's boot before run().
  const phases = new Phases(0);
  phases.mark('run');
  const stateFile = path.join(args.runDir, STATE_FILE_NAME);
  // 0711: QEMU (another user) must reach its socket dir and disks below; only root may list.
  await mkdir(args.runDir, { recursive: true, mode: 0o711 });
  await chmod(args.runDir, 0o711);
  await assertNotRunning(stateFile);
  phases.mark('runDir');
  const consoleDir = path.join(args.runDir, 'console');

  // Side by side: none of these starts a process, and the first child, libvirtd, is spawned only once all are done,
  // so it is still born in the cgroup. A failure removes the cgroup once it is made.
  const entering = phases.after(
    'cgroup',
    Cgroup.create({ uid: args.uid, parent: args.cgroupParent, root: args.cgroupRoot }).then(async (cg) => {
      await cg.enter(process.pid);
      return cg;
    }),
  );
  const [host, qemuUser, cgroup, view, pidStartTicks] = await Promise.all([
    phases.after('hostCaps', probeHostCaps(args.allowSoftwareEmulation)),
    phases.after('qemuIdentity', qemuIdentity(args.qemuUid)),
    entering,
    phases.after(
      'view',
      realViewInputs({
        vmDir: args.runDir,
        imageCacheDir: args.imageCacheDir,
        hostFiles: args.hostFiles,
        volumeDirs: args.volumeDirs,
        programs: [args.libvirtd, args.emulator],
      }).then((inputs) => existingEntries(planFilesystemView(inputs))),
    ),
    processStartTicks(process.pid),
    mkdir(consoleDir, { recursive: true, mode: 0o700 }),
  ]).catch(async (err: unknown) => {
    await entering.then(
      (cg) => cg.remove(),
      () => undefined,
    );
    throw err;
  });

  const tLibvirtd = performance.now();
  let libvirtd: PrivateLibvirtd;
  try {
    libvirtd = await startPrivateLibvirtd({
      dir: path.join(args.runDir, 'libvirt'),
      cacheDir: args.libvirtCacheDir,
      libvirtdPath: args.libvirtd,
      qemu: qemuUser,
      view,
      ...(args.netns ? { netns: args.netns } : {}),
      phases,
    });
  } catch (err) {
    await cgroup.remove();
    throw err;
  }
  const driver = new DomainDriver(libvirtd.hypervisor, libvirtd.uri);
  // Asked when Info first needs it: a virsh process at every start would cost more CPU than the rest of start-up's queries.
  let libvirtVersion: Promise<string> | undefined;
  const libvirtdMs = Math.round(performance.now() - tLibvirtd);
  phases.mark('libvirtd');
  const consoleLog = new ConsoleLog(consoleDir, args.consoleLogMaxBytes);
  const vmm = bindVmm(
    host,
    { vmDir: path.join(args.runDir, 'disks'), cacheDir: args.imageCacheDir, downloads: args.downloads, owner: qemuUser },
    args.hostFiles,
    log.child({ component: 'disks' }),
  );
  const manager = new VmManager({
    uid: args.uid,
    socketDir: qemuSocketDir(args.runDir),
    emulatorPath: args.emulator,
    host,
    libvirtd,
    driver,
    cgroup,
    consoleLog,
    qemuUser,
    vmm,
    log,
  });
  const migrationLog = log.child({ component: 'migration' });
  const migration = {
    source: new MigrationSource({
      driver,
      domainUuid: () => manager.current.domainUuid,
      dir: args.runDir,
      publish: (m) => manager.setMigration(m),
      log: migrationLog,
    }),
    target: new MigrationTarget({
      uid: args.uid,
      manager,
      driver,
      vmm,
      libvirtRunDir: path.dirname(libvirtd.socketPath),
      qemuUser,
      log: migrationLog,
    }),
  };

  let stopping = false;
  let libvirtdAlive = true;
  let launcher: LauncherServer | undefined;
  let retryDelayMs = 100;
  const watchEvents = (): { stop(): void } =>
    driver.watch({
      onLifecycle: (e) => manager.onLifecycle(e),
      onAgentLifecycle: () => manager.onAgentLifecycle(),
      onEnd: (err) => {
        // virsh also ends when libvirtd dies, possibly before libvirtd.exited
        // fires: retry with backoff and give up once libvirtd is known gone.
        // Events in the gap are lost, but the next one re-reads the whole state.
        log.warn({ err, retryDelayMs }, 'libvirt event stream ended; following it again');
        setTimeout(() => {
          if (!stopping && libvirtdAlive) {
            events = watchEvents();
            // The agent's state has no later event to re-read it with.
            manager.onAgentLifecycle();
          }
        }, retryDelayMs);
        retryDelayMs = Math.min(retryDelayMs * 2, 5000);
      },
    });
  let events = watchEvents();

  const exit = async (code: number): Promise<never> => {
    stopping = true;
    const t = performance.now();
    const steps: [string, () => Promise<unknown>][] = [
      ['stop the VM', () => manager.close()],
      ['stop libvirt events', async () => events.stop()],
      ['close the libvirt connection', () => libvirtd.hypervisor.connectClose()],
      ['stop libvirtd', () => libvirtd.stop()],
      ['remove the cgroup', () => cgroup.remove()],
    ];
    for (const [what, step] of steps) {
      await step().catch((err: unknown) => {
        log.error({ err }, `exit: could not ${what}`);
        code = 1;
      });
    }
    const s = manager.current;
    const state: StateFile = {
      ...(await readStateFile(stateFile)),
      exit: { phase: s.phase, reason: s.reason, message: s.message, atUnixMs: Date.now() },
    };
    await writeStateFile(stateFile, state);
    launcher?.endStreams();
    await new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        launcher?.server.forceShutdown();
        resolve();
      }, 5000);
      if (!launcher) return resolve();
      launcher.server.tryShutdown(() => {
        clearTimeout(force);
        resolve();
      });
    });
    await rm(args.socket, { force: true });
    log.info({ code, ms: Math.round(performance.now() - t) }, 'launcher exiting');
    process.exit(code);
  };
  const exitOnce = (code: number): void => {
    if (!stopping) void exit(code);
  };

  void libvirtd.exited.then((e) => {
    libvirtdAlive = false;
    if (stopping) return;
    manager.libvirtdExited(`libvirtd ${describeExit(e)}; QEMU went with it`);
    log.error({ exit: e }, 'libvirtd exited');
    exitOnce(1);
  });

  launcher = createLauncherServer({
    manager,
    migration,
    info: async () => ({
      uid: args.uid,
      launcherPid: process.pid,
      runDir: args.runDir,
      consoleLogPath: consoleLog.paths.current,
      previousConsoleLogPath: consoleLog.paths.previous,
      libvirtVersion: await (libvirtVersion ??= driver.version().catch((err: unknown) => {
        libvirtVersion = undefined;
        throw err;
      })),
      accelerator: host.accelerator,
      cgroup: cgroup.describe(),
      memoryLimitBytes: cgroup.memoryLimitBytes,
    }),
    onStopped: () => exitOnce(0),
  });
  phases.mark('server');
  // State file first: whoever sees the socket accept can rely on it.
  await writeStateFile(stateFile, {
    uid: args.uid,
    pid: process.pid,
    pidStartTicks,
    socket: args.socket,
    startedAtUnixMs: Date.now(),
  });
  phases.mark('stateFile');
  await rm(args.socket, { force: true });
  await bind(launcher.server, args.socket);
  await chmod(args.socket, 0o600);
  phases.mark('bound');

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      log.info({ signal }, 'stopping the VM on signal');
      manager.shutdown(DEFAULT_GRACE_PERIOD_S).then(
        () => exitOnce(0),
        (err: unknown) => {
          log.error({ err }, 'shutdown on signal failed');
          exitOnce(1);
        },
      );
    });
  }
  const codeCache = loadedCodeCache();
  log.info(
    {
      ms: Math.round(performance.now() - t0),
      libvirtdMs,
      phases: phases.all,
      codeCache: codeCache?.state ?? 'unbundled',
      ...(codeCache?.problem ? { codeCacheProblem: codeCache.problem } : {}),
      socket: args.socket,
      accelerator: host.accelerator,
      cgroup: cgroup.describe(),
    },
    'launcher ready',
  );
  // After the socket serves, off the start's path: V8 now holds what start-up compiled.
  if (codeCache?.state === 'miss' || codeCache?.state === 'rejected') {
    setImmediate(() => {
      codeCache.save();
      if (codeCache.problem) log.warn({ problem: codeCache.problem }, 'could not write the code cache');
    });
  }
}

const args = parseLauncherArgs(process.argv.slice(2));
const log = pino({ level: args.logLevel, base: { component: 'launcher', vm: args.uid } }, lossyLogDestination(1));
run(args, log).catch((err: unknown) => {
  log.fatal({ err }, 'launcher failed to start');
  process.exit(1);
});
