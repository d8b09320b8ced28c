// Disk I/O in a guest on a CSI volume against the same on the node (#27:
// goal ≥ 0.7×). `vkvm up` (one node: the control plane, the KubeVirt
// controllers, vkvm csi with its default StorageClass vkvm-local), a claim
// of that class and a VMI whose second disk is the claim: the real path, a
// claim provisioned for the VMI's pod, staged and published by the agent's
// CSI node side, its disk.img handed to QEMU as virtio-blk. In the guest,
// disk-io (disk-io.c, sent as one `kubectl exec` argument) runs on the raw
// disk; on the node, the same binary on a file in the same filesystem as the
// volume's file (checked). Four jobs with O_DIRECT, one request in flight:
// sequential write and read in 1 MiB blocks over SPAN_MIB, random 4 KiB
// reads and writes over the same span for RANDOM_S each. Node and guest
// alternate, job by job, RUNS times; medians. storage.guest-io-iothread is
// the same with the claim's disk on a QEMU iothread of its own (KubeVirt's
// dedicatedIOThread), its figures named guest_csi_iothread_*.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { ensureClusterBinary } from '../../deploy/cluster/cluster.js';
import { loadKubeConfig, makeClients } from '../../provider/kube/client.js';
import type { VirtualMachineInstanceSpec } from '../../provider/kubevirt/types.js';
import { runCommand } from '../e2e/framework/commands.js';
import { smokeVmiSpec } from '../e2e/framework/kubevirt.js';
import { poll, waitFor } from '../e2e/framework/wait.js';
import { virtualMachineInstances } from '../e2e/framework/watched.js';
import type { BenchContext, Benchmark } from './bench.js';
import { buildDiskIo, DISK_IO_MODES, parseDiskIo, rateOf, type DiskIoMode } from './disk-io.js';
import { percentile } from './stats.js';
import { startVkvmUp } from './vkvm-up.js';

const RUNS = 3;
const SPAN_MIB = 256;
const RANDOM_S = 5;
const CLAIM = 'io-data';
const NAMESPACE = 'bench-io';
/** The guest's disk of the claim: the second virtio disk of the VMI below. */
const GUEST_DISK = '/dev/vdb';
const BOOT_DEADLINE_MS = 300_000;
const VMI = { group: 'kubevirt.io', version: 'v1', namespace: NAMESPACE, plural: 'virtualmachineinstances' };

const execFileP = promisify(execFile);
const log = pino({ level: 'info', base: { component: 'bench-storage-io' } }, pino.destination(2));

/** KubeVirt's smoke VMI (the test guest's containerDisk) with the claim as its second disk in place of the empty disk and seed, which the jobs do not need. */
function vmiSpec(dedicatedIOThread: boolean): VirtualMachineInstanceSpec {
  const spec = smokeVmiSpec();
  const data = { name: 'data', disk: { bus: 'virtio' as const }, ...(dedicatedIOThread ? { dedicatedIOThread } : {}) };
  spec.domain.devices!.disks = [spec.domain.devices!.disks![0]!, data];
  spec.volumes = [spec.volumes![0]!, { name: 'data', persistentVolumeClaim: { claimName: CLAIM } }];
  return spec;
}

const args = (mode: DiskIoMode, path: string) => [mode, path, String(SPAN_MIB), ...(mode.startsWith('rand') ? [String(RANDOM_S)] : [])];

async function guestVsNode(ctx: BenchContext, dedicatedIOThread: boolean): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'vkvm-bench-io-'));
  ctx.defer('the build directory', () => rm(work, { recursive: true, force: true }));
  const tool = join(work, 'disk-io');
  await buildDiskIo(tool);
  const binary = await ensureClusterBinary(log);
  const up = await startVkvmUp(ctx, { nodes: 1, nodeName: 'vkvm-bench-io', prefix: 'vkvm-bench-io-' });
  ctx.log(`vkvm up is up (state ${up.stateDir})`);
  const clients = makeClients(loadKubeConfig(up.kubeconfigPath));
  const kubectl = (a: string[]) => runCommand(binary, ['kubectl', `--kubeconfig=${up.kubeconfigPath}`, '-n', NAMESPACE, ...a]);
  await clients.core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
  await clients.core.createNamespacedPersistentVolumeClaim({
    namespace: NAMESPACE,
    body: {
      metadata: { name: CLAIM },
      spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: `${2 * SPAN_MIB}Mi` } } },
    },
  });
  // The VM goes first, while vkvm up runs: its agent then unpublishes and unstages the volume, and the claim's deletion removes it.
  ctx.defer('the VMI and its claim', async () => {
    const ignore = () => undefined;
    await clients.custom.deleteNamespacedCustomObject({ ...VMI, name: 'io' }).catch(ignore);
    await poll(
      'the VMI and its launcher pod gone',
      async () => (await clients.core.listNamespacedPod({ namespace: NAMESPACE })).items.length,
      (n) => n === 0,
      { deadlineMs: 120_000, intervalMs: 1000 },
    ).catch((err: Error) => ctx.log(`${err.message} (going on)`));
    await clients.core.deleteNamespacedPersistentVolumeClaim({ name: CLAIM, namespace: NAMESPACE }).catch(ignore);
  });
  await clients.custom.createNamespacedCustomObject({
    ...VMI,
    body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'io' }, spec: vmiSpec(dedicatedIOThread) },
  });
  const vmi = await waitFor(
    virtualMachineInstances(clients, NAMESPACE, { name: 'io' }),
    (v) => v.status?.phase === 'Running' || v.status?.phase === 'Failed',
    { what: 'Running', deadlineMs: BOOT_DEADLINE_MS },
  );
  if (vmi.status?.phase !== 'Running') throw new Error(`the VMI is ${vmi.status?.phase}: ${JSON.stringify(vmi.status?.conditions)}`);
  const selector = `kubevirt.io/created-by=${vmi.metadata.uid}`;
  const pod = (await clients.core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: selector })).items[0]!.metadata!.name!;
  const claim = await clients.core.readNamespacedPersistentVolumeClaim({ name: CLAIM, namespace: NAMESPACE });
  const pv = await clients.core.readPersistentVolume({ name: claim.spec!.volumeName! });
  const volumeFile = join(up.stateDir, 'csi', 'volumes', `${pv.spec!.csi!.volumeHandle}.img`);
  ctx.log(`VMI io runs in pod ${pod}; its claim is ${pv.spec!.csi!.driver} volume ${volumeFile}`);

  // The guest agent answers once the guest is up; then the tool goes over as one argument.
  const sectors = await poll(
    `the guest agent answers and ${GUEST_DISK} is there`,
    () => kubectl(['exec', pod, '--', '/bin/cat', `/sys/block/${GUEST_DISK.slice(5)}/size`]),
    (r) => r.code === 0,
    { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 2000 },
  );
  if (Number(sectors.stdout.trim()) * 512 < SPAN_MIB * 1024 * 1024)
    throw new Error(`${GUEST_DISK} is only ${sectors.stdout.trim()} sectors`);
  const pushed = await kubectl([
    'exec',
    pod,
    '--',
    '/bin/sh',
    '-c',
    'echo "$0" | base64 -d >/tmp/disk-io && chmod +x /tmp/disk-io',
    (await readFile(tool)).toString('base64'),
  ]);
  if (pushed.code !== 0) throw new Error(`copying disk-io into the guest failed: ${pushed.stderr}`);

  // The node's file beside the volume's, in the same filesystem.
  const nodeFile = join(up.stateDir, 'node-io.img');
  const device = async (path: string) => (await execFileP('stat', ['-c', '%d', path])).stdout.trim();
  const inGuest = async (mode: DiskIoMode) => {
    const r = await kubectl(['exec', pod, '--', '/tmp/disk-io', ...args(mode, GUEST_DISK)]);
    if (r.code !== 0) throw new Error(`disk-io ${mode} in the guest exited ${r.code}: ${r.stderr}`);
    return parseDiskIo(r.stdout);
  };
  const onNode = async (mode: DiskIoMode) => parseDiskIo((await execFileP(tool, args(mode, nodeFile))).stdout);
  const samples = { guest: new Map<DiskIoMode, number[]>(), node: new Map<DiskIoMode, number[]>() };
  for (let i = 0; i < RUNS; i++) {
    for (const mode of DISK_IO_MODES) {
      ctx.signal.throwIfAborted();
      for (const [side, run] of [
        ['node', onNode],
        ['guest', inGuest],
      ] as const) {
        const rate = rateOf(await run(mode));
        samples[side].set(mode, [...(samples[side].get(mode) ?? []), rate.value]);
        ctx.log(`run ${i + 1} ${side} ${mode}: ${rate.value.toFixed(1)} ${rate.unit}`);
      }
      if (i === 0 && mode === 'seq-write' && (await device(nodeFile)) !== (await device(volumeFile)))
        throw new Error(`${nodeFile} and ${volumeFile} are not in one filesystem`);
    }
  }
  for (const mode of DISK_IO_MODES) {
    const unit = mode.startsWith('seq') ? 'MiB/s' : 'IOPS';
    const suffix = unit === 'MiB/s' ? 'mib_s' : 'iops';
    const name = mode.replace('-', '_');
    const [guest, node] = [percentile(samples.guest.get(mode)!, 50), percentile(samples.node.get(mode)!, 50)];
    const csi = dedicatedIOThread ? 'csi_iothread' : 'csi';
    ctx.emit(`guest_${csi}_${name}_${suffix}`, guest, unit);
    ctx.emit(`node_${name}_${suffix}`, node, unit);
    ctx.emit(`guest_${csi}_vs_node_${name}_ratio`, guest / node, 'ratio');
  }
}

export const STORAGE_IO_BENCHMARKS: Benchmark[] = [
  {
    name: 'storage.guest-io',
    description: `direct I/O in a VMI on a vkvm-local CSI claim (vkvm up) against the same jobs on the node's filesystem: sequential 1 MiB write/read over ${SPAN_MIB} MiB, random 4 KiB read/write for ${RANDOM_S} s (median of ${RUNS})`,
    run: (ctx) => guestVsNode(ctx, false),
  },
  {
    name: 'storage.guest-io-iothread',
    description: `storage.guest-io with the claim's disk on a QEMU iothread of its own (KubeVirt's dedicatedIOThread)`,
    run: (ctx) => guestVsNode(ctx, true),
  },
];
