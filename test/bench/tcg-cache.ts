// How the size of TCG's translation-block cache trades QEMU's memory against
// the guest's boot time: the test guest booted by QEMU alone (no libvirt, so
// the size can vary per run; libvirt only passes <tb-cache> on as
// `-accel tcg,tb-size=N`) with QEMU's default and a few sizes, the sizes
// alternated within each round so that a drift of the host hits them all
// alike. Chose vmm/domain/accel.ts's TCG_TB_CACHE_MIB.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULTS as LAUNCHER_DEFAULTS } from '../../launcher/args.js';
import { TCG_DEFAULT_MODEL } from '../../vmm/domain/accel.js';
import { ensureTestGuest, type TestGuest } from '../../vmm/guest/build.js';
import { until, type BenchContext, type Benchmark } from './bench.js';
import { isRunning, memRollup, qemuPssParts } from './proc.js';
import { KiB_PER_MiB, mean, percentile } from './stats.js';

/** undefined: QEMU's own default (1 GiB on a host with 8 GiB or more). */
const SIZES_MiB: readonly (number | undefined)[] = [undefined, 32, 16, 8, 4];
const ROUNDS = 6;
const GUEST_MEMORY_MiB = 128;
const BOOT_TIMEOUT_MS = 120_000;
/** Poll the console log this often: a boot takes seconds, so 50 ms is under 2 %. */
const POLL_MS = 50;
/** After the marker: let the guest's last start-up work settle before PSS is read. */
const SETTLE_MS = 1000;

const label = (size: number | undefined): string => (size === undefined ? 'default' : `${size}mib`);

/** One boot: QEMU start → boot marker on the serial console, then QEMU's PSS without guest RAM. */
async function bootOnce(
  ctx: BenchContext,
  guest: TestGuest,
  size: number | undefined,
): Promise<{ bootMs: number; besidesMiB: number; tbCacheMiB: number }> {
  const dir = await mkdtemp('/tmp/vkvm-tcg-');
  const consoleLog = `${dir}/console.log`;
  const accel = size === undefined ? 'tcg' : `tcg,tb-size=${size}`;
  const argv = [
    ...['-accel', accel, '-machine', 'q35', '-cpu', TCG_DEFAULT_MODEL, '-smp', '1', '-m', String(GUEST_MEMORY_MiB)],
    ...['-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot'],
    ...['-kernel', guest.kernelPath, '-initrd', guest.initrdPath, '-append', guest.cmdline],
    ...['-chardev', `file,id=con0,path=${consoleLog}`, '-serial', 'chardev:con0'],
  ];
  const t0 = performance.now();
  const qemu = spawn(LAUNCHER_DEFAULTS.emulator, argv, { stdio: ['ignore', 'ignore', 'inherit'] });
  const pid = qemu.pid!;
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopped ??= (async () => {
      if (isRunning(pid)) process.kill(pid, 'SIGKILL');
      await until(`QEMU ${pid} exited`, () => !isRunning(pid), 10_000, new AbortController().signal);
      await rm(dir, { recursive: true, force: true });
    })());
  ctx.defer(`QEMU ${pid}`, stop);
  try {
    let bootMs: number | undefined;
    while (bootMs === undefined) {
      if (!isRunning(pid)) throw new Error(`QEMU (${accel}) exited before the boot marker`);
      if ((await readFile(consoleLog, 'utf8').catch(() => '')).includes(guest.bootMarker)) bootMs = performance.now() - t0;
      else if (performance.now() - t0 > BOOT_TIMEOUT_MS) throw new Error(`no boot marker after ${BOOT_TIMEOUT_MS} ms (${accel})`);
      else await sleep(POLL_MS, undefined, { signal: ctx.signal });
    }
    await sleep(SETTLE_MS, undefined, { signal: ctx.signal });
    const total = await memRollup(pid);
    const parts = await qemuPssParts(pid, GUEST_MEMORY_MiB);
    if (!total || !parts) throw new Error(`QEMU (${accel}) is gone before its memory was read`);
    return { bootMs, besidesMiB: (total.pssKiB - parts.guestRamKiB) / KiB_PER_MiB, tbCacheMiB: parts.tbCacheKiB / KiB_PER_MiB };
  } finally {
    await stop();
  }
}

async function benchTbCache(ctx: BenchContext): Promise<void> {
  const guest = await ensureTestGuest({ log: (m) => ctx.log(m) });
  const boots = new Map(SIZES_MiB.map((s) => [label(s), [] as number[]]));
  const besides = new Map(SIZES_MiB.map((s) => [label(s), [] as number[]]));
  const caches = new Map(SIZES_MiB.map((s) => [label(s), [] as number[]]));
  // One warm-up boot: the page cache and QEMU's first start are paid for outside the figures.
  await bootOnce(ctx, guest, undefined);
  for (let round = 0; round < ROUNDS; round++) {
    // Rotate the order each round, so no size always runs first or after the same neighbour.
    const order = SIZES_MiB.map((_, i) => SIZES_MiB[(i + round) % SIZES_MiB.length]);
    for (const size of order) {
      const r = await bootOnce(ctx, guest, size);
      ctx.log(
        `round ${round + 1}/${ROUNDS} ${label(size)}: boot ${Math.round(r.bootMs)} ms, QEMU besides guest RAM ${r.besidesMiB.toFixed(1)} MiB, of which translation cache ${r.tbCacheMiB.toFixed(1)} MiB`,
      );
      boots.get(label(size))!.push(r.bootMs);
      besides.get(label(size))!.push(r.besidesMiB);
      caches.get(label(size))!.push(r.tbCacheMiB);
    }
  }
  const baseBoot = percentile(boots.get('default')!, 50);
  const baseBesides = mean(besides.get('default')!);
  for (const size of SIZES_MiB) {
    const key = label(size);
    const boot = percentile(boots.get(key)!, 50);
    const mem = mean(besides.get(key)!);
    ctx.emit(`tcg_tb_cache_${key}_boot_ms_p50`, boot, 'ms');
    ctx.emit(`tcg_tb_cache_${key}_qemu_pss_besides_guest_ram_mib`, mem, 'MiB');
    ctx.emit(`tcg_tb_cache_${key}_cache_pss_mib`, mean(caches.get(key)!), 'MiB');
    if (size === undefined) continue;
    ctx.emit(`tcg_tb_cache_${key}_boot_ratio`, boot / baseBoot, 'ratio');
    ctx.emit(`tcg_tb_cache_${key}_qemu_pss_besides_guest_ram_ratio`, mem / baseBesides, 'ratio');
  }
}

export const TCG_CACHE_BENCHMARKS: Benchmark[] = [
  {
    name: 'tcg.tb-cache',
    description: `TCG translation cache sizes (QEMU's default, ${SIZES_MiB.filter(Boolean).join(', ')} MiB): the ${GUEST_MEMORY_MiB} MiB test guest's boot to its marker and QEMU's PSS besides guest RAM, ${ROUNDS} alternated rounds`,
    heavy: true,
    run: benchTbCache,
  },
];
