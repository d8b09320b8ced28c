// Live migration of an idle 128 MiB guest between two launchers on this host,
// each a simulated node (its own libvirtd, cgroup parent and QEMU uid), with a
// unix-socket relay standing in for the node agents' (whose own cost is
// relay.throughput): how long the move takes from StartMigration until the
// guest runs on the target, and how long the guest is paused (libvirt's
// downtime plus vkvm's resume and announce on the target). The baseline in
// the same run is the same guest's cold boot (launcher start until its guest
// agent answers): the move is reported as a fraction of a reboot.
import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { MIGRATION_SOCKET_DIR } from '../../launcher/migration-target.js';
import type { LauncherClient } from '../../launcher/client.js';
import type { MigrationState, VmState } from '../../launcher/state.js';
import { ensureTestGuest, type TestGuest } from '../../vmm/guest/build.js';
import type { VmSpec } from '../../vmm/spec.js';
import { startUnixRelay } from '../helpers/unix-relay.js';
import { abortable, type BenchContext, type Benchmark } from './bench.js';
import { benchVmSpec, startLauncher, type LauncherPlacement } from './launchers.js';
import { percentile } from './stats.js';

const RUNS = 5;
const GUEST_MEMORY_MiB = 128;
const BOOT_TIMEOUT_MS = 180_000;
const MIGRATION_TIMEOUT_MS = 120_000;
const POLL_MS = 20;
/** The two simulated nodes: the VM's cgroup is <parent>/<vm uid> on both, and each node's QEMU has its own uid. */
const NODES = { a: { cgroupParent: 'vkvm-bench-mig-a', qemuUid: 3_000_911 }, b: { cgroupParent: 'vkvm-bench-mig-b', qemuUid: 3_000_912 } };
/** Where both launchers' namespaces see the relay's sockets. */
const M = `/run/libvirt/${MIGRATION_SOCKET_DIR}`;

/** The bench VM with what a KubeVirt VM migrates: a containerDisk overlay, an emptyDisk and the guest agent. */
function migratingSpec(uid: string, guest: TestGuest, baseImage: string): VmSpec {
  return {
    ...benchVmSpec(uid, guest, GUEST_MEMORY_MiB),
    systemUuid: crypto.randomUUID(),
    disks: [
      { name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'image', path: baseImage } },
      { name: 'data', device: 'disk', bus: 'virtio', source: { kind: 'empty', sizeMiB: 16 } },
    ],
    guestAgent: true,
  };
}

/** Polls the launcher's state until `pick` finds what the caller waits for. */
async function stateWhere<T>(
  ctx: BenchContext,
  client: LauncherClient,
  what: string,
  pick: (s: VmState) => T | undefined,
  timeoutMs: number,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const found = pick(await abortable(client.getState(), ctx.signal));
    if (found !== undefined) return found;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(POLL_MS);
  }
}

interface Move {
  bootMs: number;
  totalMs: number;
  libvirtDowntimeMs: number;
  resumeMs: number;
}

/** One VM booted on `a` and moved to `b`; both launchers removed after. */
async function oneMove(ctx: BenchContext, guest: TestGuest, imageDir: string, baseImage: string): Promise<Move> {
  const uid = crypto.randomUUID();
  const place = (n: keyof typeof NODES): LauncherPlacement => ({ uid, ...NODES[n], imageDirs: [imageDir] });
  const a = await startLauncher(ctx, place('a'));
  const b = await startLauncher(ctx, place('b'));
  try {
    const spec = migratingSpec(uid, guest, baseImage);
    await abortable(a.client.syncVm(spec), ctx.signal);
    await stateWhere(ctx, a.client, 'the guest agent', (s) => s.guestAgentConnected || undefined, BOOT_TIMEOUT_MS);
    const bootMs = performance.now() - a.spawnStartMs;

    const migrationUid = crypto.randomUUID();
    const targetPaths = await abortable(b.client.prepareIncoming(migrationUid, spec), ctx.signal);
    const aM = path.join(a.runDir, 'libvirt', 'run', MIGRATION_SOCKET_DIR);
    const bRun = path.join(b.runDir, 'libvirt', 'run');
    await mkdir(aM, { mode: 0o711 });
    const relay = await startUnixRelay([
      { listen: path.join(aM, 'lv'), dial: path.join(bRun, 'libvirt-sock') },
      { listen: path.join(aM, 'mem'), dial: path.join(bRun, MIGRATION_SOCKET_DIR, 'mem') },
      { listen: path.join(aM, 'nbd'), dial: path.join(bRun, MIGRATION_SOCKET_DIR, 'nbd'), owner: NODES.a.qemuUid },
    ]);
    try {
      const t0 = performance.now();
      await abortable(
        a.client.startMigration({
          uid: migrationUid,
          destUri: `qemu+unix:///system?socket=${M}/lv`,
          memoryUri: `unix://${M}/mem`,
          disksUri: `unix://${M}/nbd`,
          migrateDisks: [],
          targetPaths,
          maxDowntimeMs: 0,
          progressTimeoutS: 150,
          completionTimeoutS: 600,
          allowWorkloadDisruption: false,
        }),
        ctx.signal,
      );
      const done = await stateWhere(
        ctx,
        a.client,
        'the source to commit',
        (s): MigrationState | undefined => {
          if (s.migration?.phase === 'Failed' || s.migration?.phase === 'Aborted')
            throw new Error(`the migration failed: ${JSON.stringify(s.migration)}`);
          return s.migration?.phase === 'Migrated' ? s.migration : undefined;
        },
        MIGRATION_TIMEOUT_MS,
      );
      const r0 = performance.now();
      await abortable(b.client.finishIncoming(migrationUid), ctx.signal);
      const end = performance.now();
      const libvirtDowntimeMs = done.stats?.downtimeMs;
      if (libvirtDowntimeMs === undefined) throw new Error(`libvirt reported no downtime: ${JSON.stringify(done.stats)}`);
      return { bootMs, totalMs: end - t0, libvirtDowntimeMs, resumeMs: end - r0 };
    } finally {
      await relay.close();
    }
  } finally {
    // Both launchers of the VM go together: removal finds a VM's launchers by its uid.
    await Promise.all([a.remove(), b.remove()]);
  }
}

async function benchMove(ctx: BenchContext): Promise<void> {
  const guest = await ensureTestGuest({ log: (m) => ctx.log(m) });
  // The containerDisk base both nodes have by digest: shared read-only, world-readable (each QEMU has its own uid).
  const imageDir = await mkdtemp('/tmp/vkvm-bench-mimg-');
  ctx.defer('the base image', () => rm(imageDir, { recursive: true, force: true }));
  await chmod(imageDir, 0o755);
  const baseImage = path.join(imageDir, 'base.qcow2');
  await promisify(execFile)('qemu-img', ['create', '-q', '-f', 'qcow2', baseImage, '32M']);
  await chmod(baseImage, 0o644);

  const moves: Move[] = [];
  for (let i = 0; i < (ctx.cycles ?? RUNS); i++) {
    const m = await oneMove(ctx, guest, imageDir, baseImage);
    ctx.log(
      `move ${i + 1}: boot ${Math.round(m.bootMs)} ms, migration ${Math.round(m.totalMs)} ms, ` +
        `paused ${Math.round(m.libvirtDowntimeMs + m.resumeMs)} ms (libvirt ${m.libvirtDowntimeMs} + resume ${Math.round(m.resumeMs)})`,
    );
    moves.push(m);
  }
  const p50 = (f: (m: Move) => number) => percentile(moves.map(f), 50);
  ctx.emit(
    'migration_total_ms_p50',
    p50((m) => m.totalMs),
    'ms',
  );
  ctx.emit(
    'migration_downtime_ms_p50',
    p50((m) => m.libvirtDowntimeMs + m.resumeMs),
    'ms',
  );
  ctx.emit(
    'migration_libvirt_downtime_ms_p50',
    p50((m) => m.libvirtDowntimeMs),
    'ms',
  );
  ctx.emit(
    'migration_resume_ms_p50',
    p50((m) => m.resumeMs),
    'ms',
  );
  ctx.emit(
    'migration_baseline_boot_ms_p50',
    p50((m) => m.bootMs),
    'ms',
  );
  ctx.emit(
    'migration_total_to_boot_ratio',
    p50((m) => m.totalMs / m.bootMs),
    'ratio',
  );
}

export const MIGRATION_BENCHMARKS: Benchmark[] = [
  {
    name: 'migration.move',
    description: `live migration of an idle ${GUEST_MEMORY_MiB} MiB guest (overlay + emptyDisk) between two launchers, ${RUNS} moves`,
    run: benchMove,
  },
];
