// End to end through real launcher processes: private libvirtd, QEMU under
// TCG (or KVM where usable), the busybox test guest. Each test starts its own
// launcher and its teardown kills whatever is left by PID.
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { isRunning, qemuPidsOfDomain } from '../test/helpers/processes.js';
import { translateVmi } from '../provider/kubevirt/translate.js';
import { TCG_TB_CACHE_MIB } from '../vmm/domain/accel.js';
import { ensureTestGuest } from '../vmm/guest/build.js';
import { SpecError } from '../vmm/errors.js';
import { VM_SPEC_VERSION, type VmSpec } from '../vmm/spec.js';
import { Cgroup } from './cgroup.js';
import { LauncherClient, type LauncherGone } from './client.js';
import { PreconditionError } from './errors.js';
import { memoryLimitMiB } from './limits.js';
import { spawnLauncher, type SpawnedLauncher } from './spawn.js';
import type { VmState } from './state.js';
import { withDeadline } from './wait.js';

const guest = await ensureTestGuest();
const ENTRY = fileURLToPath(new URL('./main.ts', import.meta.url));
// The launcher runs from source with the TypeScript loader tap runs this file with.
const NODE_ARGS = process.execArgv.filter((a) => a === '--import=tsx');
const BOOT_TIMEOUT_MS = 120_000;

const readFileSafe = (p: string): string => {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
};

/** QEMU processes of one VM, found by its domain name on their command line (other VMs may run on this host). */
const qemuPidsOf = (uid: string): number[] => qemuPidsOfDomain(`${domainNameOf(uid)},`);

const domainNameOf = (uid: string): string => `launcher-test-${uid.slice(0, 8)}`;

/** Polls with backoff: process exit has no notification for non-children. */
async function until(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delayMs = 10; !cond(); delayMs = Math.min(delayMs * 2, 250)) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, delayMs));
  }
}

function guestSpec(uid: string, overrides: Partial<VmSpec> = {}): VmSpec {
  return {
    version: VM_SPEC_VERSION,
    uid,
    name: domainNameOf(uid),
    cpu: { sockets: 1, cores: 1, threads: 1 },
    memoryMiB: 192,
    firmware: { kind: 'bios' },
    kernelBoot: { kernelPath: guest.kernelPath, initrdPath: guest.initrdPath, cmdline: guest.cmdline },
    disks: [],
    interfaces: [],
    guestAgent: true,
    acpi: true,
    labels: { test: 'launcher' },
    ...overrides,
  };
}

/**
 * The disks and iothreads translateVmi makes of a KubeVirt VMI with ioThreadsPolicy auto (2 CPUs requested: a pool
 * of up to 4), two emptyDisks in the pool and one with a dedicatedIOThread: pool threads 1 and 2, the dedicated disk on 3.
 */
function kubevirtIoThreads(uid: string): Pick<VmSpec, 'disks' | 'ioThreads'> {
  const names = ['pool-a', 'own', 'pool-b'];
  const r = translateVmi(
    {
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachineInstance',
      metadata: { name: 'io', namespace: 'default', uid },
      spec: {
        domain: {
          ioThreadsPolicy: 'auto',
          resources: { requests: { memory: '192Mi', cpu: '2' } },
          devices: {
            disks: names.map((name) => ({ name, disk: { bus: 'virtio' }, ...(name === 'own' ? { dedicatedIOThread: true } : {}) })),
          },
        },
        volumes: names.map((name) => ({ name, emptyDisk: { capacity: '16Mi' } })),
      },
    },
    { secrets: {}, pvcs: {} },
  );
  if (r instanceof SpecError) throw r;
  return { disks: r.spec.disks, ioThreads: r.spec.ioThreads };
}

/** States a launcher reported, with a way to wait for one. */
class StateLog {
  readonly states: VmState[] = [];
  gone: LauncherGone | undefined;
  private waiters: (() => void)[] = [];
  readonly cancel: () => void;
  constructor(client: LauncherClient) {
    this.cancel = client.watchEvents({
      onState: (s) => this.push(() => this.states.push(s)),
      onGone: (g) => this.push(() => (this.gone = g)),
    });
  }
  private push(apply: () => void): void {
    apply();
    for (const w of this.waiters.splice(0)) w();
  }
  async waitFor<T>(what: string, pick: () => T | undefined, timeoutMs: number): Promise<T> {
    const found = new Promise<T>((resolve) => {
      const check = (): void => {
        const v = pick();
        if (v !== undefined) resolve(v);
        else this.waiters.push(check);
      };
      check();
    });
    return withDeadline(found, timeoutMs, `${what} (last state: ${JSON.stringify(this.states.at(-1))})`);
  }
}

/** A console stream with a way to wait for output. */
function openConsole(client: LauncherClient): {
  text(): string;
  waitFor(s: string, timeoutMs: number): Promise<void>;
  type(s: string): void;
  close(): void;
} {
  let text = '';
  let waiters: (() => void)[] = [];
  const session = client.console(
    (d) => {
      text += d.toString('latin1');
      for (const w of waiters.splice(0)) w();
    },
    () => {},
  );
  return {
    text: () => text,
    waitFor: (s, timeoutMs) =>
      withDeadline(
        new Promise<void>((resolve) => {
          const check = (): void => (text.includes(s) ? resolve() : void waiters.push(check));
          check();
        }),
        timeoutMs,
        `console output ${JSON.stringify(s)} (tail: ${JSON.stringify(text.slice(-300))})`,
      ),
    type: (s) => session.write(Buffer.from(s)),
    close: () => {
      session.close();
      waiters = [];
    },
  };
}

interface Started extends SpawnedLauncher {
  uid: string;
  runDir: string;
  events: StateLog;
}

async function startLauncher(t: Test): Promise<Started> {
  const uid = randomUUID();
  // Short: unix socket paths below it must stay under 108 bytes.
  const runDir = mkdtempSync('/tmp/vkvm-l-');
  const t0 = performance.now();
  const l = await spawnLauncher({
    args: { uid, runDir, hostFiles: { imageDirs: [path.dirname(guest.kernelPath)], hostDiskDirs: [], deniedDirs: [] } },
    nodeArgs: NODE_ARGS,
    entry: ENTRY,
  });
  t.comment(`launcher ready in ${Math.round(performance.now() - t0)} ms (process start to accepting socket)`);
  const events = new StateLog(l.client);
  t.teardown(async () => {
    events.cancel();
    l.client.close();
    if (isRunning(l.pid)) process.kill(l.pid, 'SIGKILL');
    await until('the VM is gone', () => qemuPidsOf(uid).length === 0, 10_000);
    const procs = `/sys/fs/cgroup/pids/vkvm/${uid}/cgroup.procs`;
    await until('the cgroup is empty', () => readFileSafe(procs).trim() === '', 10_000);
    await Cgroup.removeLeftover({ uid, parent: 'vkvm' });
    await rm(runDir, { recursive: true, force: true });
  });
  return { ...l, uid, runDir, events };
}

t.test('a VM boots through a launcher; console, agent, iothreads, pause and ACPI shutdown work', async (t) => {
  const l = await startLauncher(t);
  const systemUuid = randomUUID();
  const io = kubevirtIoThreads(l.uid);
  // A second virtio-blk queue on one disk, as blockMultiQueue asks of a 2-vCPU VM: QEMU takes it (a 1-vCPU guest uses one).
  io.disks[1]!.queues = 2;
  // 250m: 256 CPU shares, neither the v1 default (1024) nor the least (2).
  const spec = guestSpec(l.uid, { systemUuid, ...io, cpu: { sockets: 1, cores: 1, threads: 1, requestMillicores: 250 } });
  let t0 = performance.now();
  const synced = await l.client.syncVm(spec);
  t.comment(`SyncVm (define + start) took ${Math.round(performance.now() - t0)} ms`);
  t.match(
    synced,
    { action: 'Started', state: { phase: 'Running', reason: 'Booted', domainUuid: systemUuid } },
    'SyncVm defines and starts the domain under the system UUID',
  );

  const con = openConsole(l.client);
  t.teardown(() => con.close());
  t0 = performance.now();
  await con.waitFor(guest.bootMarker, BOOT_TIMEOUT_MS);
  t.comment(`boot marker after ${Math.round(performance.now() - t0)} ms on the console stream`);
  const info = await l.client.info();
  t.match(
    readFileSync(info.consoleLogPath, 'utf8'),
    new RegExp(`^\\S+Z stdout F ${guest.bootMarker}$`, 'm'),
    'boot marker in the console log, CRI format',
  );

  con.type('echo vkvm-$((6*7))\n');
  await con.waitFor('vkvm-42', 30_000);
  t.match(
    con.text(),
    /^vkvm-42\r?$/m,
    'a command typed into the console stream prints its output (a line of its own, not the echo of the command)',
  );

  t.match(await l.client.syncVm(spec), { action: 'Unchanged' }, 'SyncVm with an equal spec is a no-op');
  t.match(await l.client.syncVm({ ...spec, labels: { test: 'launcher', more: 'x' } }), { action: 'Updated' }, 'labels change in place');
  const refused = await l.client.syncVm({ ...spec, memoryMiB: 256 }).catch((e: unknown) => e);
  t.type(refused, PreconditionError, 'a memory change is refused while running');
  t.same((refused as PreconditionError).fieldPaths, ['memoryMiB'], 'naming the field');

  const state = await l.client.getState();
  t.ok(
    state.consoleOutputAtUnixMs >= state.startedAtUnixMs && state.startedAtUnixMs > 0,
    'the state records when the guest first wrote to its console',
  );
  const qemuUid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${state.qemuPid}/status`, 'utf8'))?.[1]);
  t.not(qemuUid, 0, 'QEMU does not run as root');
  const accel = readFileSync(`/proc/${state.qemuPid}/cmdline`, 'utf8').split('\0').join(' ');
  if (info.accelerator === 'tcg')
    t.match(accel, new RegExp(`-accel tcg,tb-size=${TCG_TB_CACHE_MIB}\\b`), 'libvirt hands QEMU the capped translation cache');
  else t.notMatch(accel, /tb-size/, 'KVM has no translation cache to cap');
  const cpus = (pid: number | 'self') => /^Cpus_allowed_list:\s*(\S+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  t.equal(cpus(state.qemuPid), cpus('self'), 'QEMU may run on every CPU, though its libvirt daemon is pinned to one');
  t.same(qemuPidsOf(l.uid), [state.qemuPid], 'GetState reports the host PID of the VM’s QEMU');
  const threadNames = readdirSync(`/proc/${state.qemuPid}/task`).map((tid) =>
    readFileSafe(`/proc/${state.qemuPid}/task/${tid}/comm`).trim(),
  );
  t.same(
    {
      spec: [io.ioThreads, io.disks.map((d) => [d.name, d.ioThread])],
      threads: threadNames.filter((n) => n.startsWith('IO iothread')).sort(),
      devices: [...accel.matchAll(/"driver":"virtio-blk-pci"[^}]*"iothread":"(iothread\d)"[^}]*"id":"ua-disk-([a-z-]+)"/g)].map((m) => [
        m[2],
        m[1],
      ]),
      queues: /"num-queues":(\d+)[^}]*"id":"ua-disk-own"/.exec(accel)?.[1],
    },
    {
      spec: [
        3,
        [
          ['pool-a', 1],
          ['own', 3],
          ['pool-b', 2],
        ],
      ],
      threads: ['IO iothread1', 'IO iothread2', 'IO iothread3'],
      devices: [
        ['pool-a', 'iothread1'],
        ['own', 'iothread3'],
        ['pool-b', 'iothread2'],
      ],
      queues: '2',
    },
    "KubeVirt's ioThreadsPolicy auto and a dedicatedIOThread: QEMU runs the three iothreads and each virtio-blk device on its own",
  );

  const limitBytes = memoryLimitMiB(spec, info.accelerator as 'kvm' | 'tcg') * 1024 * 1024;
  t.match(info, { cgroup: `v1:/vkvm/${l.uid}`, memoryLimitBytes: limitBytes });
  const cgDir = `/sys/fs/cgroup/memory/vkvm/${l.uid}`;
  t.equal(Number(readFileSync(`${cgDir}/memory.limit_in_bytes`, 'utf8')), limitBytes, 'memory limit = guest memory + overhead');
  const procs = readFileSync(`${cgDir}/cgroup.procs`, 'utf8').split('\n').map(Number);
  t.ok(procs.includes(state.qemuPid) && procs.includes(l.pid), 'launcher and QEMU live in the cgroup');
  const cpuShares = () => readFileSync(`/sys/fs/cgroup/cpu/vkvm/${l.uid}/cpu.shares`, 'utf8').trim();
  t.equal(cpuShares(), '256', "the pod's CPU weight once the VM runs (vkvm's start work had the default)");

  const second = await LauncherClient.connect(l.runDir);
  t.teardown(() => second.close());
  t.match(await second.getState(), { domainUuid: systemUuid, qemuPid: state.qemuPid }, 'a second client sees the same domain');

  // qemu-ga starts after the boot marker; the state says when it connected and what it reported.
  t0 = performance.now();
  const agentState = await l.events.waitFor(
    'the guest agent reports the guest OS',
    () => l.events.states.find((s) => s.guestAgentConnected && s.guestOsInfo),
    60_000,
  );
  t.comment(`guest OS info ${Math.round(performance.now() - t0)} ms after the boot marker`);
  const uname = await l.client.guestExec({ path: '/bin/uname', args: ['-r'], timeoutS: 20 });
  t.match(
    agentState.guestOsInfo,
    { kernelRelease: uname.stdout.toString().trim(), machine: 'x86_64', kernelVersion: /^#/ },
    "the state carries guest-get-osinfo's answer: the guest's kernel release, version and machine",
  );
  const exec = await l.client.guestExec({ path: '/bin/sh', args: ['-c', 'echo out; echo err >&2; exit 3'], timeoutS: 20 });
  t.match(exec, { exitCode: 3, stdout: Buffer.from('out\n'), stderr: Buffer.from('err\n') }, 'GuestExec returns output and exit code');
  const productUuid = await l.client.guestExec({ path: '/bin/cat', args: ['/sys/class/dmi/id/product_uuid'], timeoutS: 20 });
  t.equal(productUuid.stdout.toString().trim(), systemUuid, 'the guest sees the system UUID in SMBIOS');

  t.match(await l.client.pause(), { phase: 'Paused', domainState: 'paused' }, 'Pause');
  t.match(await l.client.pause(), { phase: 'Paused' }, 'Pause again is a no-op');
  t.match(await l.client.unpause(), { phase: 'Running', reason: 'Unpaused' }, 'Unpause');
  t.equal(cpuShares(), '256', "a pause and unpause keep the pod's CPU weight");

  t0 = performance.now();
  const final = await l.client.shutdown(60);
  t.comment(`ACPI shutdown took ${Math.round(performance.now() - t0)} ms`);
  t.match(final, { phase: 'Succeeded', reason: 'GuestShutdown' }, 'the guest powers off on ACPI within the grace period');
  t.same(await withDeadline(l.exited, 15_000, 'launcher exit'), { code: 0, signal: null }, 'the launcher exits after Shutdown');
  t.same(qemuPidsOf(l.uid), [], 'no QEMU left');
  t.notOk(existsSync(cgDir), 'the cgroup is removed');
  t.match(
    l.events.states.at(-1),
    { phase: 'Succeeded', guestAgentConnected: false, guestOsInfo: undefined },
    'a stopped VM has no guest agent',
  );
  const gone = await l.events.waitFor('gone', () => l.events.gone, 10_000);
  t.match(
    gone,
    { reason: 'LauncherExited', exit: { phase: 'Succeeded', reason: 'GuestShutdown' } },
    'the client reports why the VM is gone',
  );
});

t.test('an ACPI reboot is no power-off; Kill destroys the VM at once and the launcher exits', async (t) => {
  const l = await startLauncher(t);
  const disk = { name: 'scratch', device: 'disk' as const, bus: 'virtio' as const, source: { kind: 'empty' as const, sizeMiB: 16 } };
  await l.client.syncVm(guestSpec(l.uid, { guestAgent: false, disks: [disk] }));
  t.ok(existsSync(path.join(l.runDir, 'disks', 'scratch.qcow2')), 'the empty disk is prepared in the run dir');

  // The guest powers off on the ACPI button; QEMU reports SHUTDOWN, and libvirt resets it instead of ending it.
  const con = openConsole(l.client);
  t.teardown(() => con.close());
  await con.waitFor(guest.bootMarker, BOOT_TIMEOUT_MS);
  // init starts acpid after the boot marker; a button pressed before it listens is lost.
  con.type('until [ -e /run/acpid.pid ]; do sleep 0.1; done; echo acpid-$((6*7))\n');
  await con.waitFor('acpid-42', 30_000);
  const boots = (): number => con.text().split(guest.bootMarker).length - 1;
  const bootsBefore = boots();
  const { qemuPid } = await l.client.getState();
  t.equal(await l.client.softReboot(), 'Acpi', 'without a guest agent, the reboot goes through the ACPI button');
  await until('the guest boots again', () => boots() > bootsBefore, BOOT_TIMEOUT_MS);
  t.match(
    { state: await l.client.getState(), stopped: l.events.states.filter((s) => s.phase === 'Succeeded' || s.phase === 'Failed') },
    { state: { phase: 'Running', qemuPid }, stopped: [] },
    'a guest reboot never shows as a power-off: Running throughout, on the same QEMU',
  );
  t.match(await l.client.reset(), { phase: 'Running', reason: 'Reset' }, 'Reset keeps the VM running');
  const noAgent = await l.client.guestExec({ path: '/bin/true' }).catch((e: unknown) => e);
  t.match(noAgent, { kind: 'Precondition', fieldPaths: ['guestAgent'] }, 'GuestExec without an agent channel is FAILED_PRECONDITION');
  const t0 = performance.now();
  t.match(await l.client.kill(), { phase: 'Succeeded', reason: 'Killed', qemuPid: 0 }, 'Kill reports the destroyed VM');
  t.comment(`Kill took ${Math.round(performance.now() - t0)} ms`);
  t.same(qemuPidsOf(l.uid), [], 'QEMU is gone when Kill returns');
  t.same(await withDeadline(l.exited, 15_000, 'launcher exit'), { code: 0, signal: null }, 'the launcher exits after Kill');
  t.notOk(existsSync(`/sys/fs/cgroup/memory/vkvm/${l.uid}`), 'the cgroup is removed');
  t.notOk(existsSync(path.join(l.runDir, 'disks', 'scratch.qcow2')), 'the disk is removed with the VM');
});

t.test('kill -9 of the launcher takes QEMU with it', async (t) => {
  const l = await startLauncher(t);
  const { state } = await l.client.syncVm(guestSpec(l.uid, { guestAgent: false }));
  t.ok(isRunning(state.qemuPid), 'QEMU runs');
  const t0 = performance.now();
  process.kill(l.pid, 'SIGKILL');
  await until('QEMU has exited', () => !isRunning(state.qemuPid), 10_000);
  t.comment(`QEMU gone ${Math.round(performance.now() - t0)} ms after SIGKILL to the launcher`);
  t.same(qemuPidsOf(l.uid), [], 'no QEMU of this VM in /proc');
  const gone = await l.events.waitFor('gone', () => l.events.gone, 10_000);
  t.match(gone, { reason: 'LauncherDied' }, 'the client reports the launcher died');
});

t.test('an invalid spec is INVALID_ARGUMENT naming the field, and nothing is created', async (t) => {
  const l = await startLauncher(t);
  const err = await l.client.syncVm(guestSpec(l.uid, { memoryMiB: 0 })).catch((e: unknown) => e);
  t.type(err, SpecError, 'SyncVm fails with a spec error');
  t.match((err as SpecError).causes, [{ path: 'memoryMiB' }], 'naming the field');
  const wrongUid = await l.client.syncVm(guestSpec(randomUUID())).catch((e: unknown) => e);
  t.match((wrongUid as SpecError).causes, [{ path: 'uid' }], 'a spec for another VM is refused');
  t.match(await l.client.getState(), { phase: 'Pending', domainState: 'absent', qemuPid: 0 }, 'no domain');
  t.same(qemuPidsOf(l.uid), [], 'no QEMU');
  t.match(await l.client.info(), { memoryLimitBytes: 0 }, 'no limits applied');
  t.notOk(existsSync(path.join(l.runDir, 'console', 'console.log')), 'no console log');
});
