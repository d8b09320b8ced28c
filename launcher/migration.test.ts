// Live migration between two real launchers on this host (each its own
// private libvirtd, host UUID, hostname, cgroup parent and QEMU uid), with
// test/helpers/unix-relay.ts standing in for the node agents' relay: the
// guest keeps its boot and its disk bytes, the source is left with nothing,
// and an abort leaves the guest running on the source. Runs under the e2e
// lock (it boots TCG guests).
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { argvOf, isRunning, qemuPidsOfDomain } from '../test/helpers/processes.js';
import { startUnixRelay } from '../test/helpers/unix-relay.js';
import { ensureTestGuest } from '../vmm/guest/build.js';
import { VM_SPEC_VERSION, type VmSpec } from '../vmm/spec.js';
import { Cgroup } from './cgroup.js';
import { LauncherClient } from './client.js';
import { MIGRATION_SOCKET_DIR } from './migration-target.js';
import { spawnLauncher, type SpawnedLauncher } from './spawn.js';
import type { MigrationState, VmState } from './state.js';
import { withDeadline } from './wait.js';

const guest = await ensureTestGuest();
const ENTRY = fileURLToPath(new URL('./main.ts', import.meta.url));
const NODE_ARGS = process.execArgv.filter((a) => a === '--import=tsx');
// Two simulated nodes: a QEMU uid and a cgroup parent each (a VM's cgroup is <parent>/<vm uid>, the same uid on both).
const NODES = { a: { qemuUid: 3_000_901, cgroupParent: 'vkvm-mig-a' }, b: { qemuUid: 3_000_902, cgroupParent: 'vkvm-mig-b' } };
// Where the relay listens and dials, as both launchers' namespaces see it.
const M = `/run/libvirt/${MIGRATION_SOCKET_DIR}`;

/** A base image in a directory the launchers may read: the containerDisk each node has by digest. */
const imageDir = mkdtempSync('/tmp/vkvm-mimg-');
const baseImage = path.join(imageDir, 'base.qcow2');
execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', baseImage, '32M']);
// Shared read-only files stay root's and world-readable (each VM's QEMU has its own uid).
chmodSync(imageDir, 0o755);
chmodSync(baseImage, 0o644);
t.teardown(() => rm(imageDir, { recursive: true, force: true }));

interface Node extends SpawnedLauncher {
  runDir: string;
  states: VmState[];
  qemuUid: number;
  waitFor<T>(what: string, pick: (s: VmState) => T | undefined, timeoutMs: number): Promise<T>;
}

async function startNode(t: Test, uid: string, node: keyof typeof NODES): Promise<Node> {
  const { qemuUid, cgroupParent } = NODES[node];
  const runDir = mkdtempSync(`/tmp/vkvm-m${node}-`);
  const l = await spawnLauncher({
    args: {
      uid,
      runDir,
      qemuUid,
      cgroupParent,
      hostFiles: { imageDirs: [path.dirname(guest.kernelPath), imageDir], hostDiskDirs: [], deniedDirs: [] },
    },
    nodeArgs: NODE_ARGS,
    entry: ENTRY,
  });
  const states: VmState[] = [];
  let waiters: (() => void)[] = [];
  const cancel = l.client.watchEvents({
    onState: (s) => {
      states.push(s);
      for (const w of waiters.splice(0)) w();
    },
    onGone: () => {},
  });
  t.teardown(async () => {
    cancel();
    l.client.close();
    if (isRunning(l.pid)) process.kill(l.pid, 'SIGKILL');
    await withDeadline(l.exited, 10_000, 'launcher exit').catch(() => {});
    await Cgroup.removeLeftover({ uid, parent: cgroupParent }).catch(() => {});
    await rm(runDir, { recursive: true, force: true });
  });
  const waitFor = <T>(what: string, pick: (s: VmState) => T | undefined, timeoutMs: number): Promise<T> =>
    withDeadline(
      new Promise<T>((resolve) => {
        const check = (): void => {
          const v = states.map(pick).find((x) => x !== undefined);
          if (v !== undefined) resolve(v);
          else waiters.push(check);
        };
        check();
      }),
      timeoutMs,
      `${node}: ${what} (last state: ${JSON.stringify(states.at(-1))})`,
    ).finally(() => (waiters = []));
  return { ...l, runDir, states, qemuUid, waitFor };
}

function guestSpec(uid: string): VmSpec {
  return {
    version: VM_SPEC_VERSION,
    uid,
    name: `mig-${uid.slice(0, 8)}`,
    systemUuid: randomUUID(),
    cpu: { sockets: 1, cores: 1, threads: 1 },
    memoryMiB: 128,
    firmware: { kind: 'bios' },
    kernelBoot: { kernelPath: guest.kernelPath, initrdPath: guest.initrdPath, cmdline: guest.cmdline },
    disks: [
      // Each virtio disk on an iothread of its own (KubeVirt's dedicatedIOThread), which the target's QEMU must have too.
      { name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'image', path: baseImage }, ioThread: 1 },
      { name: 'data', device: 'disk', bus: 'virtio', source: { kind: 'empty', sizeMiB: 16 }, ioThread: 2 },
      {
        name: 'cloudinit',
        device: 'cdrom',
        bus: 'sata',
        source: { kind: 'cloudInit', userData: '#cloud-config\n', metaData: `instance-id: ${uid}\n` },
      },
    ],
    ioThreads: 2,
    interfaces: [],
    guestAgent: true,
    acpi: true,
    labels: {},
  };
}

const sh = async (client: LauncherClient, script: string): Promise<string> => {
  const r = await client.guestExec({ path: '/bin/sh', args: ['-c', script], timeoutS: 30 });
  if (r.exitCode !== 0) throw new Error(`guest: ${script}: exit ${r.exitCode}: ${r.stderr.toString()}`);
  return r.stdout.toString();
};

/** What the test reads back from the guest: its boot and the first bytes it wrote on each writable disk. */
const GUEST_FACTS = 'cat /proc/sys/kernel/random/boot_id; head -c 12 /dev/vda; echo; head -c 12 /dev/vdb; echo';

/** Two launchers of one VM, the guest booted on `a` with data written on both disks, `b` prepared, the relay between. */
async function setUp(t: Test) {
  const uid = randomUUID();
  const spec = guestSpec(uid);
  const [a, b] = [await startNode(t, uid, 'a'), await startNode(t, uid, 'b')];
  await a.client.syncVm(spec);
  await a.waitFor('the guest agent connects', (s) => s.guestAgentConnected || undefined, 120_000);
  await sh(a.client, 'printf root-bytes1 > /dev/vda; printf data-bytes-2 > /dev/vdb; sync');
  const before = await sh(a.client, GUEST_FACTS);
  const migrationUid = randomUUID();
  const paths = await b.client.prepareIncoming(migrationUid, spec);
  const aM = path.join(a.runDir, 'libvirt', 'run', MIGRATION_SOCKET_DIR);
  const bRun = path.join(b.runDir, 'libvirt', 'run');
  mkdirSync(aM, { mode: 0o711 });
  const relay = await startUnixRelay([
    { listen: path.join(aM, 'lv'), dial: path.join(bRun, 'libvirt-sock') },
    { listen: path.join(aM, 'mem'), dial: path.join(bRun, MIGRATION_SOCKET_DIR, 'mem') },
    // The source QEMU dials the NBD socket itself, as its own uid.
    { listen: path.join(aM, 'nbd'), dial: path.join(bRun, MIGRATION_SOCKET_DIR, 'nbd'), owner: a.qemuUid },
  ]);
  t.teardown(() => relay.close());
  const request = {
    uid: migrationUid,
    destUri: `qemu+unix:///system?socket=${M}/lv`,
    memoryUri: `unix://${M}/mem`,
    disksUri: `unix://${M}/nbd`,
    migrateDisks: [],
    targetPaths: paths,
    maxDowntimeMs: 0,
    progressTimeoutS: 150,
    completionTimeoutS: 600,
    allowWorkloadDisruption: false,
  };
  return { uid, spec, a, b, before, migrationUid, paths, request };
}

const migrationOf = (phase: MigrationState['phase']) => (s: VmState) => (s.migration?.phase === phase ? s.migration : undefined);
const failedOrAborted = (s: VmState) => (s.migration?.phase === 'Failed' ? s.migration : undefined);

t.test('a running guest migrates with its boot, overlay and empty disk; the source is left with nothing', async (t) => {
  const { spec, a, b, before, migrationUid, paths, request } = await setUp(t);
  t.match(b.states.at(-1), { phase: 'Pending', migration: { uid: migrationUid, role: 'Target', phase: 'Prepared' } }, 'target prepared');
  t.same(Object.keys(paths.diskPaths).sort(), ['cloudinit', 'data', 'root'], 'the target prepared every disk');

  const t0 = performance.now();
  const started = await a.client.startMigration(request);
  t.match(started, { uid: migrationUid, role: 'Source', phase: 'Running' }, 'StartMigration replies once the job runs');
  t.match(await a.client.startMigration(request), { uid: migrationUid }, 'StartMigration again with the same uid is a no-op');
  const done = await Promise.race([
    a.waitFor('the source commits', migrationOf('Migrated'), 300_000),
    a.waitFor('failure', failedOrAborted, 300_000).then((m) => Promise.reject(new Error(`migration failed: ${JSON.stringify(m)}`))),
  ]);
  const totalMs = Math.round(performance.now() - t0);
  t.comment(`migration: ${totalMs} ms wall, libvirt time_elapsed ${done.stats?.timeElapsedMs} ms, downtime ${done.stats?.downtimeMs} ms`);
  t.ok((done.stats?.dataProcessed ?? 0) > 0, 'the final job figures are reported');
  await a.waitFor('the source VM ends as Migrated', (s) => (s.phase === 'Succeeded' && s.reason === 'Migrated') || undefined, 30_000);
  const aborted = await a.client.abortMigration(migrationUid).catch((e: unknown) => e);
  t.match(aborted, { kind: 'Precondition' }, 'AbortMigration after the commit is FAILED_PRECONDITION');

  t.match(await b.client.getState(), { migration: { phase: 'Prepared' } }, 'the target stays paused until told');
  const r0 = performance.now();
  const running = await b.client.finishIncoming(migrationUid);
  t.comment(`FinishIncoming (resume + announce) took ${Math.round(performance.now() - r0)} ms`);
  t.match(running, { phase: 'Running', reason: 'Migrated', domainUuid: spec.systemUuid }, 'FinishIncoming runs the VM on the target');
  t.match(await b.client.finishIncoming(migrationUid), { phase: 'Running' }, 'FinishIncoming again is a no-op');
  await b.waitFor('the target reports Resumed', migrationOf('Resumed'), 10_000);
  t.equal(await sh(b.client, GUEST_FACTS), before, 'the same boot_id and the same bytes on the overlay and the empty disk');

  const aDisks = path.join(a.runDir, 'disks');
  t.match(await a.client.kill(), { phase: 'Succeeded', reason: 'Migrated' }, 'the source launcher stops with nothing to destroy');
  t.same(await withDeadline(a.exited, 15_000, 'source launcher exit'), { code: 0, signal: null }, 'and exits cleanly');
  t.same(
    ['root.qcow2', 'data.qcow2'].filter((f) => existsSync(path.join(aDisks, f))),
    [],
    'the source disks are removed',
  );
  const pids = qemuPidsOfDomain(`${spec.name},`);
  t.same(pids.length, 1, 'one QEMU runs the VM: the target’s');
  const argv = pids.length === 1 ? argvOf(pids[0]!).join(' ') : '';
  t.same(
    [...argv.matchAll(/"driver":"virtio-blk-pci"[^}]*"iothread":"(\w+)"[^}]*"id":"ua-disk-([\w-]+)"/g)].map((m) => [m[2], m[1]]),
    [
      ['root', 'iothread1'],
      ['data', 'iothread2'],
    ],
    'the target’s QEMU keeps the source’s iothreads, each disk on its own',
  );
  t.notOk(existsSync(`/sys/fs/cgroup/memory/${NODES.a.cgroupParent}/${spec.uid}`), 'the source cgroup is removed');
});

t.test('an abort mid-way leaves the guest running on the source; CancelIncoming cleans the target', async (t) => {
  const { spec, a, b, before, migrationUid, request } = await setUp(t);
  // 1 MiB/s: 128 MiB of guest memory cannot finish before the abort.
  await a.client.startMigration({ ...request, bandwidthMiBps: 1 });
  await a.waitFor('the copy makes progress', (s) => (s.migration?.stats?.dataProcessed ?? 0) > 0 || undefined, 60_000);
  const a0 = performance.now();
  const aborted = await a.client.abortMigration(migrationUid);
  t.comment(`AbortMigration took ${Math.round(performance.now() - a0)} ms`);
  t.match(aborted, { phase: 'Aborted', reason: 'AbortRequested' }, 'AbortMigration replies once the job is gone');
  t.match(await a.client.abortMigration(migrationUid), { phase: 'Aborted' }, 'AbortMigration again is a no-op');
  await a.waitFor('the source runs again', (s) => (s.phase === 'Running' && s.migration?.phase === 'Aborted') || undefined, 30_000);
  t.equal(await sh(a.client, GUEST_FACTS), before, 'the guest runs on, with the same boot and bytes');

  const bDisks = path.join(b.runDir, 'disks');
  await b.client.cancelIncoming(migrationUid);
  t.same(await withDeadline(b.exited, 15_000, 'target launcher exit'), { code: 0, signal: null }, 'the target launcher exits');
  t.same(
    ['root.qcow2', 'data.qcow2', 'cloudinit.iso'].filter((f) => existsSync(path.join(bDisks, f))),
    [],
    'the target disks are removed',
  );
  t.notOk(existsSync(path.join(b.runDir, 'libvirt', 'run', MIGRATION_SOCKET_DIR)), 'and its migration socket dir');
  t.same(qemuPidsOfDomain(`${spec.name},`).length, 1, 'one QEMU runs the VM: the source’s');
});
