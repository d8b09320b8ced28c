// A pod whose image the node does not have yet, through the real control
// plane: created → Running (the pull from a loopback docker-registry, the
// disk taken out, the VM started) and → the guest's boot marker on the
// console. The image is the test guest's bootable disk, pushed under a new
// name each run with one extra file beside /disk, so no blob of it is in the
// store (cold). Next to it, one pod at a time on the same node: the same disk
// already in the store (localhost/vkvm/test-guest:v1, imported as `vkvm up`
// does), and the same kernel (the bzImage the disk and the kernel-boot image
// hold, not the PVH vmlinux), initramfs and command line booted directly by
// QEMU, so what booting from the disk through SeaBIOS and syslinux costs under
// TCG shows beside the pull's, with no difference of kernel in it.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import { ensureTestGuestDisk } from '../../vmm/guest/boot-disk.js';
import { ensureTestGuest, GUEST_BOOT_MARKER, GUEST_CMDLINE } from '../../vmm/guest/build.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { buildImage, pushImage, tarLayer } from '../helpers/oci.js';
import { until, type BenchContext, type Benchmark } from './bench.js';
import { startBenchNode, type BenchNode } from './cluster-node.js';
import { PodWatch } from './pod-watch.js';
import { qemuPidsOf } from './proc.js';
import { percentile } from './stats.js';

const NODE = 'vkvm-bench-pod-images';
const NAMESPACE = 'bench-pod-images';
const RUNS = 3;
const BOOT_TIMEOUT_MS = 300_000;

type Kind = 'cold' | 'warm' | 'kernel';

function vmPod(name: string, container: { image: string }, annotations?: Record<string, string>): V1Pod {
  return {
    metadata: { name, namespace: NAMESPACE, ...(annotations ? { annotations } : {}) },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': NODE },
      tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
      containers: [{ name: 'vm', ...container, resources: { requests: { cpu: '100m' }, limits: { memory: '192Mi' } } }],
    },
  };
}

/** When the console log first held the boot marker (its CRI timestamp: "<ISO time> stdout F|P <text>"). */
async function bootMarkerAt(node: BenchNode, uid: string): Promise<number | undefined> {
  const text = await readFile(join(node.agentStateDir, 'vms', uid, 'console', 'console.log'), 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    const m = /^(\S+) stdout [FP] (.*)$/.exec(line);
    if (m?.[2]!.includes(GUEST_BOOT_MARKER)) return Date.parse(m[1]!);
  }
  return undefined;
}

/** Creates the pod, waits for its boot marker, removes it; returns create → Running and create → boot marker. */
async function timePod(ctx: BenchContext, node: BenchNode, watch: PodWatch, pod: V1Pod): Promise<{ runningMs: number; bootMs: number }> {
  const name = pod.metadata!.name!;
  const created = Date.now();
  const made = await node.clients.core.createNamespacedPod({ namespace: NAMESPACE, body: pod });
  const uid = made.metadata!.uid!;
  await watch.until(`${name} Running`, () => watch.of(name).running !== undefined || watch.of(name).failed !== undefined, {
    timeoutMs: BOOT_TIMEOUT_MS,
    signal: ctx.signal,
    describe: () => JSON.stringify(watch.pod(name)?.status?.containerStatuses?.[0]?.state ?? {}),
  });
  if (watch.of(name).failed !== undefined) throw new Error(`pod ${name} failed: ${JSON.stringify(watch.pod(name)?.status)}`);
  let marker: number | undefined;
  await until(
    `the boot marker of ${name}`,
    async () => (marker = await bootMarkerAt(node, uid)) !== undefined,
    BOOT_TIMEOUT_MS,
    ctx.signal,
  );
  const times = { runningMs: watch.of(name).running! - created, bootMs: marker! - created };
  await node.clients.core.deleteNamespacedPod({ name, namespace: NAMESPACE, gracePeriodSeconds: 0 });
  const dir = join(node.agentStateDir, 'vms', uid);
  await until(`the VM of ${name} is removed`, () => qemuPidsOf(uid).length === 0 && !existsSync(dir), 60_000, ctx.signal);
  return times;
}

async function benchColdImage(ctx: BenchContext): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-bench-pod-images-'));
  ctx.defer('the scratch directory', () => rm(dir, { recursive: true, force: true }));
  const registry = await startDockerRegistry({ teardown: (fn) => ctx.defer('docker-registry', fn) }, { dir: join(dir, 'registry') });
  const disk = readFileSync((await ensureTestGuestDisk({ log: (m) => ctx.log(m) })).path);
  // The bzImage, as the disk boots it: the PVH vmlinux would boot seconds sooner and blur the comparison.
  const guest = await ensureTestGuest({ log: (m) => ctx.log(m), pvh: false });
  const node = await startBenchNode(ctx, {
    nodeName: NODE,
    namespace: NAMESPACE,
    // The registry on loopback, listed as an operator would; the guest's own files for the direct kernel boot.
    extraArgs: [`--local-registry=${registry.host}`, `--host-image-dir=${dirname(guest.kernelPath)}`],
  });
  const watch = await PodWatch.start(node.clients, node.namespace);
  ctx.defer('pod watch', () => watch.stop());
  const kernelPod = (name: string) =>
    vmPod(name, { image: `kernel:${guest.kernelPath}` }, { 'vkvm.io/initrd': guest.initrdPath, 'vkvm.io/kernel-cmdline': GUEST_CMDLINE });

  // Warm-up: the first pod pays for first use (scheduler caches, libvirt's capabilities, page cache).
  const w = await timePod(ctx, node, watch, kernelPod('warmup'));
  ctx.log(`warm-up: Running ${w.runningMs} ms, boot marker ${w.bootMs} ms`);
  const samples: Record<Kind, Array<{ runningMs: number; bootMs: number }>> = { cold: [], warm: [], kernel: [] };
  for (let run = 1; run <= RUNS; run++) {
    const repo = `bench/cold-${run}`;
    // One layer: the disk and a file of its own beside /disk, so its blob is new to the store.
    const layer = tarLayer([
      { path: 'disk/disk.img', content: disk },
      { path: 'run-id', content: randomBytes(16).toString('hex') },
    ]);
    await pushImage(registry.base, repo, 'v1', [buildImage([{ tar: layer }])]);
    const pods: Record<Kind, V1Pod> = {
      cold: vmPod(`cold-${run}`, { image: `${registry.host}/${repo}:v1` }),
      warm: vmPod(`warm-${run}`, { image: TEST_GUEST_IMAGE }),
      kernel: kernelPod(`kernel-${run}`),
    };
    for (const kind of ['cold', 'warm', 'kernel'] as const) {
      const s = await timePod(ctx, node, watch, pods[kind]);
      samples[kind].push(s);
      ctx.log(`run ${run} ${kind}: Running ${s.runningMs} ms, boot marker ${s.bootMs} ms`);
    }
  }
  const p50 = (kind: Kind, what: 'runningMs' | 'bootMs') =>
    Math.round(
      percentile(
        samples[kind].map((s) => s[what]),
        50,
      ),
    );
  ctx.emit('pod_create_to_running_cold_image_ms', p50('cold', 'runningMs'), 'ms');
  ctx.emit('pod_create_to_boot_marker_cold_image_ms', p50('cold', 'bootMs'), 'ms');
  ctx.emit('pod_create_to_running_warm_image_ms', p50('warm', 'runningMs'), 'ms');
  ctx.emit('pod_create_to_boot_marker_disk_ms', p50('warm', 'bootMs'), 'ms');
  ctx.emit('pod_create_to_running_kernel_ms', p50('kernel', 'runningMs'), 'ms');
  ctx.emit('pod_create_to_boot_marker_kernel_ms', p50('kernel', 'bootMs'), 'ms');
  ctx.emit('pod_disk_boot_extra_ms', p50('warm', 'bootMs') - p50('kernel', 'bootMs'), 'ms');
}

export const POD_IMAGE_BENCHMARKS: readonly Benchmark[] = [
  {
    name: 'images.pod-cold',
    description: `a pod whose image is not cached (pushed to a loopback docker-registry) → Running and booted; beside it the same disk cached, and the disk's kernel and initramfs booted directly by QEMU (p50 of ${RUNS})`,
    run: benchColdImage,
  },
];
