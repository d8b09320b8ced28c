// Launcher benchmarks: how fast a launcher gets a VM's QEMU running, and how
// much memory a VM costs besides QEMU and guest RAM. The launchers are the
// built ones (dist/launcher/main.js), started like the node agent starts them.
import { spawn } from 'node:child_process';
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { DEFAULTS as LAUNCHER_DEFAULTS } from '../../launcher/args.js';
import { processCpu } from '../../provider/proc-cpu.js';
import { ensureTestGuest, type TestGuest } from '../../vmm/guest/build.js';
import { abortable, until, type BenchContext, type Benchmark } from './bench.js';
import {
  benchVmSpec,
  readyLogLine,
  startedLogPhases,
  startLauncher,
  waitForTextInFile,
  type BenchLauncher,
  type PhaseMarks,
} from './launchers.js';
import { inspectNodeMemory } from './node-inspect.js';
import { classify, guestRamPssKiB, isRunning, memRollup, processTree, type MemRollup, type ProcClass, type ProcEntry } from './proc.js';
import { BYTES_PER_MiB, KiB_PER_MiB, mean, percentile } from './stats.js';

/** VMs timed by launcher.start, after one warm-up VM that is reported apart. */
const START_RUNS = 20;
/** VMs running at once while launcher.overhead samples memory. */
const CONCURRENT_VMS = 10;
const GUEST_MEMORY_MiB = 128;
/** PSS samples per process, SAMPLE_INTERVAL_MS apart (Node's heap moves with GC). */
const SAMPLES = 5;
const SAMPLE_INTERVAL_MS = 1000;
/** Ten TCG guests booting at once on two cores take a while. */
const BOOT_TIMEOUT_MS = 600_000;

async function testGuest(ctx: BenchContext): Promise<TestGuest> {
  return ensureTestGuest({ log: (m) => ctx.log(m) });
}

const round = (ms: number): number => Math.round(ms);

/**
 * libvirt's QEMU capabilities cache (the node's launchers' libvirtds share it: launcher/libvirtd.ts).
 * A file rewritten during a start means that libvirtd found the cache outdated
 * and probed QEMU again, which costs over a second under TCG.
 */
const CAPS_CACHE_DIR = path.join(LAUNCHER_DEFAULTS.libvirtCacheDir, 'qemu', 'capabilities');

async function capsCacheMtimeMs(): Promise<number> {
  const names = await readdir(CAPS_CACHE_DIR).catch(() => [] as string[]);
  const mtimes = await Promise.all(
    names.map((n) =>
      stat(path.join(CAPS_CACHE_DIR, n)).then(
        (s) => s.mtimeMs,
        () => 0,
      ),
    ),
  );
  return Math.max(0, ...mtimes);
}

/**
 * CPU ms the VM's processes used so far, QEMU apart: the launcher's Node
 * process, and everything else of its tree with the children it reaped
 * (libvirtd, virsh, the view's helpers).
 */
async function launcherCpuMs(launcherPid: number): Promise<{ nodeMs: number; treeMs: number }> {
  let nodeMs = 0;
  let treeMs = 0;
  for (const p of await processTree(launcherPid)) {
    if (p.comm.startsWith('qemu-system')) continue;
    const cpu = await processCpu(p.pid);
    if (!cpu) continue;
    if (p.pid === launcherPid) nodeMs = cpu.selfMs;
    treeMs += cpu.selfMs + cpu.reapedChildrenMs;
  }
  return { nodeMs, treeMs };
}

/** Seconds since boot, and when a process started on that clock (/proc, in 10 ms ticks). */
async function uptimeS(): Promise<number> {
  return Number((await readFile('/proc/uptime', 'utf8')).split(' ')[0]);
}
async function processStartS(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Field 22, counted after the command's closing parenthesis (the command may hold spaces).
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]) / 100;
}

/**
 * Consecutive steps of a start as durations: the marks sorted by time, each minus the one before (the first minus
 * `from`). Steps that ran side by side show as the part of the wall time each added.
 */
function stepDurations(marks: PhaseMarks, from = 0): [string, number][] {
  let last = from;
  return Object.entries(marks)
    .sort((a, b) => a[1] - b[1])
    .map(([name, at]) => {
      const d = at - last;
      last = at;
      return [name, d];
    });
}

/** Spawns a launcher, syncs one VM and returns the phases in ms; the VM keeps running. */
async function startVm(
  ctx: BenchContext,
  guest: TestGuest,
): Promise<{
  l: BenchLauncher;
  qemuPid: number;
  spawnToReadyMs: number;
  syncVmMs: number;
  totalMs: number;
  /** Launcher spawn → QEMU's exec (10 ms ticks). */
  qemuExecMs: number;
  cpu: { nodeMs: number; treeMs: number };
}> {
  const l = await startLauncher(ctx);
  const { state } = await abortable(l.client.syncVm(benchVmSpec(l.uid, guest, GUEST_MEMORY_MiB)), ctx.signal);
  const doneMs = performance.now();
  if (!(state.qemuPid > 0 && isRunning(state.qemuPid))) throw new Error(`SyncVm returned without a running QEMU: ${JSON.stringify(state)}`);
  const qemuAgeMs = ((await uptimeS()) - (await processStartS(state.qemuPid))) * 1000;
  return {
    l,
    qemuPid: state.qemuPid,
    spawnToReadyMs: l.readyMs - l.spawnStartMs,
    syncVmMs: doneMs - l.readyMs,
    totalMs: doneMs - l.spawnStartMs,
    qemuExecMs: doneMs - l.spawnStartMs - qemuAgeMs,
    cpu: await launcherCpuMs(l.pid),
  };
}

async function benchStart(ctx: BenchContext): Promise<void> {
  const guest = await testGuest(ctx);
  const totals: number[] = [];
  const toReady: number[] = [];
  const syncs: number[] = [];
  const nodeBoots: number[] = [];
  const libvirtds: number[] = [];
  const cachedTotals: number[] = [];
  const nodeCpus: number[] = [];
  const treeCpus: number[] = [];
  const codeCache = new Map<string, number>();
  /** The split of spawn → QEMU running, per step (launcher/phases.ts marks), one sample per run. */
  const steps = new Map<string, number[]>();
  const addStep = (name: string, ms: number): void => void steps.set(name, [...(steps.get(name) ?? []), ms]);
  let reprobes = 0;
  // Sequential: on a 2-core host, concurrent starts would measure CPU contention.
  for (let i = 0; i <= START_RUNS; i++) {
    const capsBefore = await capsCacheMtimeMs();
    const r = await startVm(ctx, guest);
    const reprobed = (await capsCacheMtimeMs()) > capsBefore;
    const ready = await readyLogLine(r.l.logFile);
    const started = await startedLogPhases(r.l.logFile);
    await r.l.remove();
    ctx.log(
      `${i === 0 ? 'warm-up' : `run ${i}/${START_RUNS}`}: ${round(r.totalMs)} ms to QEMU ` +
        `(socket ready ${round(r.spawnToReadyMs)} ms${ready ? `, of which launcher run() ${ready.ms} ms, libvirtd ${ready.libvirtdMs} ms` : ''}; SyncVm ${round(r.syncVmMs)} ms; ` +
        `CPU: launcher Node ${r.cpu.nodeMs} ms, its tree ${r.cpu.treeMs} ms; code cache ${ready?.codeCache ?? '?'})` +
        (reprobed ? '; libvirt re-probed QEMU capabilities' : ''),
    );
    if (i === 0) {
      // The first VM may pay for a libvirt capabilities probe and a cold page cache.
      ctx.emit('launcher_start_to_qemu_ms_warmup', r.totalMs, 'ms');
      continue;
    }
    totals.push(r.totalMs);
    if (reprobed) reprobes++;
    else cachedTotals.push(r.totalMs);
    toReady.push(r.spawnToReadyMs);
    syncs.push(r.syncVmMs);
    nodeCpus.push(r.cpu.nodeMs);
    treeCpus.push(r.cpu.treeMs);
    codeCache.set(ready?.codeCache ?? 'unknown', (codeCache.get(ready?.codeCache ?? 'unknown') ?? 0) + 1);
    if (ready) {
      nodeBoots.push(r.spawnToReadyMs - ready.ms);
      libvirtds.push(ready.libvirtdMs);
    }
    if (ready?.phases?.bound !== undefined && started?.resumed !== undefined) {
      // run() begins at `run` ms of the process's life; before it, Node's boot and the module loading.
      for (const [name, ms] of stepDurations(ready.phases)) addStep(`launcher_${name}`, ms);
      // Spawn → the process's clock starts, plus the socket's accept reaching the client.
      addStep('spawn_and_connect', r.spawnToReadyMs - ready.phases.bound);
      for (const [name, ms] of stepDurations(started)) addStep(`syncvm_${name}`, ms);
      // The gRPC call's own way there and back, and SyncVm's parsing and checks before the start.
      addStep('syncvm_call', r.syncVmMs - started.resumed);
      // Inside startedPaused: QEMU exec'd this long after the launcher was spawned, and ran this long until SyncVm returned.
      addStep('qemu_exec_after_spawn', r.qemuExecMs);
      addStep('qemu_exec_to_running', r.totalMs - r.qemuExecMs);
    }
  }
  for (const [name, samples] of [
    ['launcher_start_to_qemu_ms', totals],
    // The runs in which libvirt found its capabilities cache valid.
    ['launcher_start_to_qemu_cached_ms', cachedTotals],
    ['launcher_spawn_to_socket_ms', toReady],
    ['launcher_syncvm_ms', syncs],
    // spawn → the launcher's run() begins: Node start-up and module loading (plus the client's connect).
    ['launcher_node_boot_ms', nodeBoots],
    ['launcher_libvirtd_start_ms', libvirtds],
    // CPU, spawn → QEMU running (10 ms ticks): the launcher's Node process, and its whole tree but QEMU.
    ['launcher_node_cpu_ms', nodeCpus],
    ['launcher_tree_cpu_ms', treeCpus],
  ] as const) {
    if (samples.length === 0) continue;
    ctx.emit(`${name}_p50`, percentile(samples, 50), 'ms');
    ctx.emit(`${name}_p95`, percentile(samples, 95), 'ms');
  }
  for (const [name, samples] of steps) {
    const key = name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    ctx.emit(`launcher_step_${key}_ms_p50`, percentile(samples, 50), 'ms');
  }
  ctx.emit('launcher_start_caps_reprobes', reprobes, 'runs');
  // How the launcher's V8 code cache served (launcher/code-cache.ts); a rejected cache falls back to compiling.
  for (const state of ['hit', 'miss', 'rejected', 'off'])
    if (codeCache.has(state)) ctx.emit(`launcher_code_cache_${state}`, codeCache.get(state)!, 'runs');
}

interface ClassSample extends MemRollup {
  procs: number;
}

/** One sample of one VM: memory per class of process. */
async function sampleVm(
  l: BenchLauncher,
): Promise<{ byClass: Map<ProcClass, ClassSample>; procs: (ProcEntry & { cls: ProcClass; mem: MemRollup })[] }> {
  const byClass = new Map<ProcClass, ClassSample>();
  const procs: (ProcEntry & { cls: ProcClass; mem: MemRollup })[] = [];
  for (const p of await processTree(l.pid)) {
    const mem = await memRollup(p.pid);
    if (!mem) continue;
    const cls = classify(p, l.pid);
    procs.push({ ...p, cls, mem });
    const c = byClass.get(cls) ?? { procs: 0, pssKiB: 0, pssAnonKiB: 0, pssFileKiB: 0, rssKiB: 0 };
    byClass.set(cls, {
      procs: c.procs + 1,
      pssKiB: c.pssKiB + mem.pssKiB,
      pssAnonKiB: c.pssAnonKiB + mem.pssAnonKiB,
      pssFileKiB: c.pssFileKiB + mem.pssFileKiB,
      rssKiB: c.rssKiB + mem.rssKiB,
    });
  }
  return { byClass, procs };
}

const mib = (kib: number): number => kib / KiB_PER_MiB;

async function benchOverhead(ctx: BenchContext): Promise<void> {
  const guest = await testGuest(ctx);
  const vms: BenchLauncher[] = [];
  for (let i = 0; i < CONCURRENT_VMS; i++) {
    const r = await startVm(ctx, guest);
    vms.push(r.l);
    ctx.log(`VM ${i + 1}/${CONCURRENT_VMS} started (launcher ${r.l.pid}, QEMU ${r.qemuPid})`);
  }
  // Steady state: every guest has booted (its marker is in the console log).
  const t0 = performance.now();
  for (const l of vms) {
    const info = await l.client.info();
    await waitForTextInFile(info.consoleLogPath, guest.bootMarker, BOOT_TIMEOUT_MS - (performance.now() - t0), ctx.signal);
  }
  ctx.log(
    `all ${CONCURRENT_VMS} guests booted after ${round(performance.now() - t0)} ms; sampling PSS ${SAMPLES}× every ${SAMPLE_INTERVAL_MS} ms`,
  );

  const CLASSES: ProcClass[] = ['launcher', 'libvirtd', 'virsh', 'ns-helpers', 'other', 'qemu'];
  /** Per class: one value per (VM, sample). */
  const series = new Map<ProcClass, { pss: number[]; anon: number[]; file: number[]; rss: number[]; procs: number[] }>(
    CLASSES.map((c) => [c, { pss: [], anon: [], file: [], rss: [], procs: [] }]),
  );
  const overhead: number[] = [];
  const qemuBesidesRam: number[] = [];
  let lastProcs: Awaited<ReturnType<typeof sampleVm>>['procs'] = [];
  for (let s = 0; s < SAMPLES; s++) {
    if (s > 0) await sleep(SAMPLE_INTERVAL_MS, undefined, { signal: ctx.signal });
    for (const l of vms) {
      if (!isRunning(l.pid)) throw new Error(`launcher ${l.pid} of ${l.uid} died during sampling`);
      const { byClass, procs } = await sampleVm(l);
      if (!byClass.has('qemu')) throw new Error(`no QEMU in the process tree of launcher ${l.pid}`);
      lastProcs = procs;
      let total = 0;
      for (const c of CLASSES) {
        const v = byClass.get(c) ?? { procs: 0, pssKiB: 0, pssAnonKiB: 0, pssFileKiB: 0, rssKiB: 0 };
        const ser = series.get(c)!;
        ser.pss.push(mib(v.pssKiB));
        ser.anon.push(mib(v.pssAnonKiB));
        ser.file.push(mib(v.pssFileKiB));
        ser.rss.push(mib(v.rssKiB));
        ser.procs.push(v.procs);
        if (c !== 'qemu') total += mib(v.pssKiB);
      }
      overhead.push(total);
      const qemu = procs.find((p) => p.cls === 'qemu')!;
      qemuBesidesRam.push(mib(qemu.mem.pssKiB - ((await guestRamPssKiB(qemu.pid, GUEST_MEMORY_MiB)) ?? 0)));
    }
  }
  ctx.log(`processes of the last VM sampled (all but qemu count as overhead):`);
  for (const p of lastProcs) {
    ctx.log(
      `  ${String(p.pid).padStart(7)} ${p.cls.padEnd(10)} pss ${mib(p.mem.pssKiB).toFixed(1).padStart(6)} MiB (anon ${mib(p.mem.pssAnonKiB).toFixed(1)}, file ${mib(p.mem.pssFileKiB).toFixed(1)}; rss ${mib(p.mem.rssKiB).toFixed(1)})  ${p.argv.join(' ').slice(0, 100)}`,
    );
  }
  for (const c of CLASSES) {
    const ser = series.get(c)!;
    ctx.log(
      `  ${c.padEnd(10)} mean per VM: ${mean(ser.procs).toFixed(1)} procs, pss ${mean(ser.pss).toFixed(1)} MiB (anon ${mean(ser.anon).toFixed(1)}, file ${mean(ser.file).toFixed(1)}), rss ${mean(ser.rss).toFixed(1)} MiB`,
    );
  }

  ctx.emit('vm_overhead_pss_mib', mean(overhead), 'MiB');
  ctx.emit('vm_overhead_pss_mib_max', Math.max(...overhead), 'MiB');
  ctx.emit('qemu_pss_mib', mean(series.get('qemu')!.pss), 'MiB');
  // What QEMU costs besides the guest's RAM: under TCG mostly its translation cache (vmm/domain/accel.ts).
  ctx.emit('qemu_pss_besides_guest_ram_mib', mean(qemuBesidesRam), 'MiB');
  const key = (c: ProcClass): string => c.replace('-', '_');
  for (const c of CLASSES.filter((c) => c !== 'qemu')) ctx.emit(`vm_overhead_${key(c)}_pss_mib`, mean(series.get(c)!.pss), 'MiB');
  ctx.emit('vm_overhead_launcher_pss_anon_mib', mean(series.get('launcher')!.anon), 'MiB');
  ctx.emit('vm_overhead_libvirtd_pss_anon_mib', mean(series.get('libvirtd')!.anon), 'MiB');
  ctx.emit('launcher_rss_mib', mean(series.get('launcher')!.rss), 'MiB');
  ctx.emit('libvirtd_rss_mib', mean(series.get('libvirtd')!.rss), 'MiB');

  // Where the launcher's own memory goes, as Node sees it (after PSS: the inspector costs memory).
  const probe = vms[0]!;
  const m = await inspectNodeMemory(probe.pid, ctx.signal);
  ctx.log(`launcher ${probe.pid} as Node sees it: before GC ${JSON.stringify(m.beforeGc)}; after GC ${JSON.stringify(m.afterGc)}`);
  const b = (n: number): number => n / BYTES_PER_MiB;
  ctx.emit('launcher_heap_used_mib', b(m.beforeGc.heapUsed), 'MiB');
  ctx.emit('launcher_heap_total_mib', b(m.beforeGc.heapTotal), 'MiB');
  ctx.emit('launcher_heap_used_after_gc_mib', b(m.afterGc.heapUsed), 'MiB');
  ctx.emit('launcher_heap_total_after_gc_mib', b(m.afterGc.heapTotal), 'MiB');
  ctx.emit('launcher_external_mib', b(m.afterGc.external), 'MiB');
}

// ---------------------------------------------------------------- Node baselines

const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const distUrl = (p: string): string => pathToFileURL(path.join(DIST, p)).href;

/** What a launcher process holds before it does anything: Node alone, then with the launcher's modules loaded. */
const BASELINES: { name: string; code: string }[] = [
  { name: 'node_bare', code: '' },
  {
    name: 'node_grpc',
    code: `const grpc = await import('@grpc/grpc-js');
const { loadLauncherService } = await import(${JSON.stringify(distUrl('launcher/proto/load.js'))});
const server = new grpc.Server();
server.addService(loadLauncherService().service, {});`,
  },
  {
    // Every module launcher/main.ts imports, and a gRPC server with the launcher's service.
    name: 'node_launcher_modules',
    code: `const grpc = await import('@grpc/grpc-js');
await import('pino');
await import('@unraid/libvirt');
for (const m of ['vmm/probe/virtualization.js', 'launcher/args.js', 'launcher/cgroup.js', 'launcher/console/log-file.js', 'launcher/domain-driver.js', 'launcher/libvirtd.js', 'launcher/server.js', 'launcher/state.js', 'launcher/vmm.js', 'launcher/vm-manager.js'])
  await import(new URL(m, ${JSON.stringify(distUrl('/'))}).href);
const { loadLauncherService } = await import(${JSON.stringify(distUrl('launcher/proto/load.js'))});
const server = new grpc.Server();
server.addService(loadLauncherService().service, {});`,
  },
];

/** Starts `count` idle Node processes running `code`, waits for each to print "ready", and returns the mean PSS/RSS per process. */
async function idleNodes(ctx: BenchContext, code: string, count: number): Promise<{ pss: number; anon: number; rss: number }> {
  const script = `${code}\nsetInterval(() => {}, 1 << 30);\nprocess.stdout.write('ready\\n');`;
  const pids: number[] = [];
  ctx.defer('idle node processes', () => {
    for (const pid of pids) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  });
  const ready: Promise<void>[] = [];
  for (let i = 0; i < count; i++) {
    // cwd: bare specifiers resolve from the package's node_modules.
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      cwd: path.resolve(DIST, '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    pids.push(child.pid!);
    ready.push(
      new Promise<void>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on('line', (line) => line === 'ready' && resolve());
        child.once('exit', (c, s) => reject(new Error(`idle node exited early (code ${c}, signal ${s})`)));
      }),
    );
  }
  await Promise.all(ready);
  const pss: number[] = [];
  const anon: number[] = [];
  const rss: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    if (s > 0) await sleep(SAMPLE_INTERVAL_MS, undefined, { signal: ctx.signal });
    for (const pid of pids) {
      const m = await memRollup(pid);
      if (!m) throw new Error(`idle node ${pid} is gone`);
      pss.push(mib(m.pssKiB));
      anon.push(mib(m.pssAnonKiB));
      rss.push(mib(m.rssKiB));
    }
  }
  for (const pid of pids) process.kill(pid, 'SIGKILL');
  await until('idle node processes exited', () => pids.every((p) => !isRunning(p)), 10_000, ctx.signal);
  return { pss: mean(pss), anon: mean(anon), rss: mean(rss) };
}

async function benchNodeBaseline(ctx: BenchContext): Promise<void> {
  for (const b of BASELINES) {
    const r = await idleNodes(ctx, b.code, CONCURRENT_VMS);
    ctx.log(
      `${b.name}: ${CONCURRENT_VMS} at once, mean pss ${r.pss.toFixed(1)} MiB (anon ${r.anon.toFixed(1)}), rss ${r.rss.toFixed(1)} MiB`,
    );
    ctx.emit(`${b.name}_pss_mib`, r.pss, 'MiB');
    ctx.emit(`${b.name}_pss_anon_mib`, r.anon, 'MiB');
  }
}

export const LAUNCHER_BENCHMARKS: Benchmark[] = [
  {
    name: 'launcher.start',
    description: `launcher spawn → QEMU running (SyncVm returned a qemuPid): ${START_RUNS} VMs one after another, ${GUEST_MEMORY_MiB} MiB test guest, p50/p95 and the split`,
    run: benchStart,
  },
  {
    name: 'launcher.overhead',
    description: `PSS per VM of launcher + libvirtd + virsh + namespace helpers (QEMU apart) with ${CONCURRENT_VMS} VMs running`,
    run: benchOverhead,
  },
  {
    name: 'launcher.node-baseline',
    description: `PSS of ${CONCURRENT_VMS} idle Node processes: bare, with gRPC, with all the launcher's modules (where the launcher's memory goes)`,
    run: benchNodeBaseline,
  },
];
