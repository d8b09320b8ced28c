// Clone of a 1 GiB volume (#27: goal ≤ 1 s), through the CSI driver's own
// path: `vkvm csi` as a process, CreateVolume with the source volume as its
// content source on its socket, which copies the file with
// `cp --reflink=auto` (provider/csi/volume-files.ts). The source holds 1 GiB
// of random bytes (no hole for a sparse copy to skip). Measured on the host's
// filesystem (ext4 here: a byte copy) and on an XFS filesystem with reflink
// the bench makes on a loop-backed file and removes after (a copy-on-write
// clone). Baselines in the same run, on the same file, alternated with the
// clones: `cp --reflink=never` (the byte copy by hand, left in the page
// cache), the same followed by `sync -d` of the copy (what an on-disk
// copy costs; the driver fsyncs its clone before CreateVolume returns, so
// this is the byte copy's floor) and a sequential
// O_DIRECT read of it (what the disk gives, without the page cache). Each
// step starts after a `sync`, so none pays for the write-back of another's,
// and with the source out of the page cache.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BLOCK_CAPABILITY, createRandomBlockVolume, csiClient, mountScratchXfs, startDriverProcess } from '../helpers/csi-driver.js';
import { removeScratch } from '../helpers/csi-leftovers.js';
import type { BenchContext, Benchmark } from './bench.js';
import { percentile } from './stats.js';

const GIB = 1024 * 1024 * 1024;
const RUNS = 5;
const FILESYSTEMS = ['ext4', 'xfs'] as const;
type Filesystem = (typeof FILESYSTEMS)[number];
const STEPS = ['clone', 'cp', 'cpSync', 'directRead'] as const;
type Step = (typeof STEPS)[number];

const execFileP = promisify(execFile);

/**
 * Milliseconds `fn` took, each from the same start, untimed: what earlier steps left dirty written back, and
 * `source` dropped from the page cache (posix_fadvise DONTNEED through dd's nocache), as a golden image no VM
 * read lately is; only that file's pages go, not the shared host's.
 */
async function timedMs(source: string, fn: () => Promise<unknown>): Promise<number> {
  await execFileP('sync');
  await execFileP('dd', [`if=${source}`, 'iflag=nocache', 'count=0', 'status=none']);
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** The driver in a directory on `fs`: the host's own for ext4 (this host's / is; checked), a scratch XFS otherwise. */
async function driverDirOn(ctx: BenchContext, fs: Filesystem, root: string): Promise<string> {
  if (fs === 'xfs') return join(await mountScratchXfs(root), 'csi');
  const { stdout } = await execFileP('stat', ['-f', '-c', '%T', root]);
  // stat says ext2/ext3 for ext4 too: they share a magic number.
  if (!/^ext[234]/.test(stdout.trim())) ctx.log(`the host filesystem under ${root} is ${stdout.trim()}, not ext4`);
  return join(root, 'csi');
}

async function cloneOn(ctx: BenchContext, fs: Filesystem): Promise<Record<string, number>> {
  // Short: the driver's unix socket path must fit in 107 bytes.
  const root = await mkdtemp('/tmp/vkvm-bclone-');
  ctx.defer(`the ${fs} scratch directory`, () => removeScratch(root));
  const dir = await driverDirOn(ctx, fs, root);
  const driver = await startDriverProcess({ dir, socket: join(root, 'csi.sock'), nodeId: 'bench' });
  ctx.defer(`vkvm csi on ${fs}`, async () => void (await driver.stop()));
  const { call, close } = csiClient(driver.socket);
  ctx.defer('the CSI client', close);
  const staging = join(root, 'staging');
  await mkdir(staging);
  const source = await createRandomBlockVolume(call, { driverDir: dir, staging, name: 'golden', bytes: GIB });
  const file = join(dir, 'volumes', `${source}.img`);
  const copy = join(root, 'copy.img');
  // Each step times itself and removes what it made, untimed.
  const steps: Record<Step, (i: number) => Promise<number>> = {
    clone: async (i) => {
      let clone = '';
      const ms = await timedMs(file, async () => {
        const made = await call('Controller', 'CreateVolume', {
          name: `clone-${i}`,
          volumeCapabilities: [BLOCK_CAPABILITY],
          volumeContentSource: { volume: { volumeId: source } },
        });
        clone = (made.volume as { volumeId: string }).volumeId;
      });
      await call('Controller', 'DeleteVolume', { volumeId: clone });
      return ms;
    },
    cp: async () => {
      const ms = await timedMs(file, () => execFileP('cp', ['--reflink=never', '--sparse=always', file, copy]));
      await rm(copy);
      return ms;
    },
    cpSync: async () => {
      const ms = await timedMs(file, async () => {
        await execFileP('cp', ['--reflink=never', '--sparse=always', file, copy]);
        await execFileP('sync', ['-d', copy]);
      });
      await rm(copy);
      return ms;
    },
    directRead: (_i) => timedMs(file, () => execFileP('dd', [`if=${file}`, 'of=/dev/null', 'bs=1M', 'iflag=direct', 'status=none'])),
  };
  const samples: Record<Step, number[]> = { clone: [], cp: [], cpSync: [], directRead: [] };
  for (let i = 0; i < RUNS; i++) {
    // Each run starts with the next step: none always follows the same one (the box is shared and noisy).
    for (const step of STEPS.map((_, k) => STEPS[(i + k) % STEPS.length]!)) {
      ctx.signal.throwIfAborted();
      samples[step].push(await steps[step](i));
    }
    ctx.log(`${fs} run ${i + 1}: ${STEPS.map((step) => `${step} ${samples[step][i]!.toFixed(0)} ms`).join(', ')}`);
  }
  await call('Controller', 'DeleteVolume', { volumeId: source });
  return Object.fromEntries(STEPS.map((step) => [step, percentile(samples[step], 50)]));
}

async function cloneGiB(ctx: BenchContext): Promise<void> {
  for (const fs of FILESYSTEMS) {
    const ms = await cloneOn(ctx, fs);
    ctx.emit(`clone_1gib_ms_${fs}`, Math.round(ms.clone!), 'ms');
    ctx.emit(`cp_1gib_ms_${fs}`, Math.round(ms.cp!), 'ms');
    ctx.emit(`cp_sync_1gib_ms_${fs}`, Math.round(ms.cpSync!), 'ms');
    ctx.emit(`direct_read_1gib_ms_${fs}`, Math.round(ms.directRead!), 'ms');
    ctx.emit(`clone_vs_cp_ratio_${fs}`, ms.clone! / ms.cp!, 'ratio');
    ctx.emit(`clone_vs_cp_sync_ratio_${fs}`, ms.clone! / ms.cpSync!, 'ratio');
    ctx.emit(`clone_vs_direct_read_ratio_${fs}`, ms.clone! / ms.directRead!, 'ratio');
  }
}

export const STORAGE_CLONE_BENCHMARKS: Benchmark[] = [
  {
    name: 'storage.clone',
    description: `a 1 GiB volume of random bytes cloned by vkvm csi (CreateVolume from a volume) on ext4 and on a scratch XFS with reflink, against cp --reflink=never (alone and with sync -d of the copy) and an O_DIRECT read of it (median of ${RUNS})`,
    run: cloneGiB,
  },
];
