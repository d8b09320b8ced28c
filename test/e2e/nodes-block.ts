// The multi-node suite's (multi-node/nodes.ts) block-volume subtest: a tenant's VMI on a Block-mode claim
// of the default class `vkvm-local` and a Filesystem-mode one, booting from a
// Block-mode DataVolume the node imports from the registry onto the device
// (its firmware boots the test guest's disk from it). The agent's
// CSI node side publishes the device under the pod's volumeDevices dir and
// the VM's view makes it a node of QEMU's own; the guest writes a marker
// that the host reads back from the volume; the kubelet API's stats summary
// and /metrics report both claims' volumes (NodeGetVolumeStats); and with the
// VMI gone nothing of either volume is left on the node.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Test } from 'tap';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import type { DataVolume } from '../../provider/kubevirt/datavolume-types.js';
import { importReportOf } from '../../provider/kubevirt/datavolume-report.js';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import type { VolumeStats } from '../../provider/csi-node/volume-stats.js';
import { apiOutcome, pods, poll, smokeVmiSpec, virtualMachineInstances, waitFor, waitForGone } from './framework/index.js';
import type { CommandResult } from './framework/commands.js';
import type { StorageCase } from './nodes-storage.js';

const MiB = 2 ** 20;
// Sizes no other disk of the smoke VM has (its emptyDisk is 64Mi), so the guest finds each by size.
const BLOCK_MIB = 80;
const FS_MIB = 48;
const ROOT_MIB = 72;
const DV = { group: 'cdi.kubevirt.io', version: 'v1beta1', plural: 'datavolumes' };
const blockRoot: DataVolume = {
  apiVersion: 'cdi.kubevirt.io/v1beta1',
  kind: 'DataVolume',
  metadata: { name: 'blk-root' },
  spec: {
    source: { registry: { url: `docker://${TEST_GUEST_IMAGE}` } },
    storage: { volumeMode: 'Block', resources: { requests: { storage: `${ROOT_MIB}Mi` } } },
  },
};

const claim = (name: string, mib: number, volumeMode: 'Block' | 'Filesystem'): V1PersistentVolumeClaim => ({
  metadata: { name },
  spec: { accessModes: ['ReadWriteOnce'], volumeMode, resources: { requests: { storage: `${mib}Mi` } } },
});

export async function vmiOnBlockClaim(
  t: Test,
  o: StorageCase & {
    /** kubectl as the tenant, in the namespace. */
    kubectl: (args: string[]) => Promise<CommandResult>;
    /** kubectl as the cluster admin. */
    adminKubectl: (args: string[]) => Promise<CommandResult>;
  },
): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const stateDir = node.simulated?.stateDir ?? o.upStateDir;
  for (const c of [claim('blk-data', BLOCK_MIB, 'Block'), claim('fs-data', FS_MIB, 'Filesystem')])
    await tenant.core.createNamespacedPersistentVolumeClaim({ namespace, body: c });
  await tenant.custom.createNamespacedCustomObject({ ...DV, namespace, body: blockRoot });
  const spec = smokeVmiSpec();
  spec.nodeSelector = { 'kubernetes.io/hostname': node.name };
  // No containerDisk: the guest boots from the Block DataVolume or not at all.
  spec.domain.devices!.disks = spec.domain.devices!.disks!.map((d) => (d.name === 'containerdisk' ? { ...d, name: 'root' } : d));
  spec.volumes = spec.volumes!.map((v) => (v.name === 'containerdisk' ? { name: 'root', dataVolume: { name: 'blk-root' } } : v));
  spec.domain.devices!.disks!.push({ name: 'blk', disk: { bus: 'virtio' } }, { name: 'fs', disk: { bus: 'virtio' } });
  spec.volumes!.push(
    { name: 'blk', persistentVolumeClaim: { claimName: 'blk-data' } },
    { name: 'fs', persistentVolumeClaim: { claimName: 'fs-data' } },
  );
  const kv = { group: 'kubevirt.io', version: 'v1', namespace, plural: 'virtualmachineinstances' };
  await tenant.custom.createNamespacedCustomObject({
    ...kv,
    body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'vmi-blk' }, spec },
  });
  const vmi: VirtualMachineInstance = await waitFor(
    virtualMachineInstances(admin, namespace, { name: 'vmi-blk' }),
    (v) => v.status?.phase === 'Running' || v.status?.phase === 'Failed',
    { what: 'Running', deadlineMs: o.bootDeadlineMs },
  );
  t.equal(vmi.status?.phase, 'Running', 'the VMI on a Block-mode claim runs');
  const [launcher] = (await admin.core.listNamespacedPod({ namespace, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` })).items;
  const podName = launcher!.metadata!.name!;
  const uid = launcher!.metadata!.uid!;
  const pvOf = async (name: string) =>
    admin.core.readPersistentVolume({
      name: (await tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace })).spec!.volumeName!,
    });
  const [blockPv, fsPv, rootPv] = [await pvOf('blk-data'), await pvOf('fs-data'), await pvOf('blk-root')];
  const device = join(stateDir, 'pods', uid, 'volumeDevices', 'kubernetes.io~csi', blockPv.metadata!.name!);
  const volumeFiles = [blockPv, fsPv, rootPv].map((pv) => join(stateDir, 'csi', 'volumes', `${pv.spec!.csi!.volumeHandle}.img`));
  t.same(
    {
      mode: blockPv.spec?.volumeMode,
      published: (await node.exec(['stat', '-L', '-c', '%F %U', device])).stdout.trim(),
    },
    { mode: 'Block', published: 'block special file root' },
    `the device is published at the pod's volumeDevices path, and the host's node stays root's: ${device}`,
  );

  // QEMU's own view (libvirt gives it a /dev of its own, inside the launcher's view): the node is its uid's, and no loop device is there.
  const qemuView = await node.exec([
    'sh',
    '-c',
    `for p in $(pgrep -f '^[^ ]*qemu-system'); do [ -b /proc/$p/root${device} ] && echo "$(stat -c '%u %a' /proc/$p/root${device}) $(ls /proc/$p/root/dev | grep -c '^loop')"; done; true`,
  ]);
  t.match(
    qemuView.stdout.trim(),
    /^[1-9]\d* 600 0$/,
    "in QEMU's view the device is a node of its uid's alone (0600), and its /dev holds no loop device",
  );

  const marker = `blk-marker-${randomBytes(4).toString('hex')}`;
  // The guest reads its write back past its page cache; the host then reads it from the volume.
  const sectors = (BLOCK_MIB * MiB) / 512;
  const script =
    `d=; for b in /sys/block/vd*; do [ "$(cat $b/size)" = ${sectors} ] && d=/dev/\${b##*/}; done; [ -n "$d" ] && ` +
    `printf ${marker} > $d && sync && echo 3 > /proc/sys/vm/drop_caches && head -c ${marker.length} $d`;
  const guest = await poll(
    "the guest agent writes and reads the block disk's marker",
    () => o.kubectl(['exec', podName, '--', '/bin/sh', '-c', script]),
    (r) => r.code === 0,
    { deadlineMs: 120_000, intervalMs: 2000 },
  );
  t.same(
    { guest: guest.stdout.trim(), host: (await node.exec(['head', '-c', String(marker.length), device])).stdout },
    { guest: marker, host: marker },
    'the guest writes the marker on its raw block disk and reads it back; the host reads it from the CSI volume',
  );

  // The guest booted with no other boot disk; it sees the imported device whole: the claim's size, the image's MBR.
  const rootSectors = (ROOT_MIB * MiB) / 512;
  const rootSeen = await o.kubectl([
    'exec',
    podName,
    '--',
    '/bin/sh',
    '-c',
    `for b in /sys/block/vd*; do [ "$(cat $b/size)" = ${rootSectors} ] && od -An -tx1 -j510 -N2 /dev/\${b##*/}; done`,
  ]);
  const rootClaim = await tenant.core.readNamespacedPersistentVolumeClaim({ name: 'blk-root', namespace });
  const rootDv = (await tenant.custom.getNamespacedCustomObject({ ...DV, namespace, name: 'blk-root' })) as DataVolume;
  t.same(
    {
      mbr: rootSeen.stdout.replace(/\s+/g, ' ').trim(),
      mode: rootClaim.spec?.volumeMode,
      report: importReportOf(rootClaim.status?.conditions),
      dv: rootDv.status?.phase,
    },
    { mbr: '55 aa', mode: 'Block', report: { phase: 'Succeeded', progress: '100.00%' }, dv: 'Succeeded' },
    `the guest boots from the Block DataVolume imported from ${TEST_GUEST_IMAGE}: a ${ROOT_MIB} MiB disk with the image's boot record; the claim records the import, the DataVolume Succeeded`,
  );

  // The CSI node side reads volume stats every 10 s; the summary serves what it last read.
  const summaryVolumes = async () => {
    const r = await o.adminKubectl(['get', '--raw', `/api/v1/nodes/${node.name}/proxy/stats/summary`]);
    const summary = JSON.parse(r.stdout) as { pods: { podRef: { uid: string }; volume?: VolumeStats[] }[] };
    return summary.pods.find((p) => p.podRef.uid === uid)?.volume ?? [];
  };
  const volumes = await poll("the summary's volume entries", summaryVolumes, (vs) => vs.length === 3, { deadlineMs: 40_000 });
  // Sizes as tap matches them: a filesystem's capacity is its size less ext4's own, so only "some" is certain.
  const byName = (n: string) => {
    const v = volumes.find((v) => v.name === n);
    return v && { ...v, capacityBytes: v.name === 'fs' ? (v.capacityBytes ?? 0) > 0 : v.capacityBytes };
  };
  t.match(
    { fs: byName('fs'), blk: byName('blk'), root: byName('root') },
    {
      root: { pvcRef: { name: 'blk-root', namespace }, capacityBytes: ROOT_MIB * MiB },
      fs: { pvcRef: { name: 'fs-data', namespace }, capacityBytes: true, availableBytes: Number, inodes: Number },
      blk: { pvcRef: { name: 'blk-data', namespace }, capacityBytes: BLOCK_MIB * MiB },
    },
    "the stats summary reports the pod's volumes by its volume names, with their claims and capacity",
  );
  const metrics = (await o.adminKubectl(['get', '--raw', `/api/v1/nodes/${node.name}/proxy/metrics`])).stdout;
  t.match(
    metrics,
    new RegExp(`kubelet_volume_stats_capacity_bytes\\{namespace="${namespace}",persistentvolumeclaim="fs-data"\\} [1-9]`),
    "the node's /metrics has the kubelet's volume gauges by claim",
  );

  await tenant.custom.deleteNamespacedCustomObject({ ...kv, name: 'vmi-blk' });
  await waitForGone(pods(admin, namespace, { labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` }), { deadlineMs: 120_000 });
  const leftovers = async () => ({
    mounts: (await node.exec(['sh', '-c', `grep -c ${stateDir}/p /proc/self/mountinfo || true`])).stdout.trim(),
    volumeDevices: (await node.exec(['test', '-e', join(stateDir, 'pods', uid)])).code === 0,
    loops: (await Promise.all(volumeFiles.map((f) => node.exec(['losetup', '-j', f])))).map((r) => r.stdout).join(''),
  });
  t.same(
    await poll('nothing of the volumes left', leftovers, (l) => l.mounts === '0' && !l.volumeDevices && l.loops === '', {
      deadlineMs: 60_000,
    }).catch(leftovers),
    { mounts: '0', volumeDevices: false, loops: '' },
    'with the VMI gone: no mount, no volumeDevices path or pod directory, no loop device over any of its volumes',
  );
  for (const name of ['blk-data', 'fs-data']) await tenant.core.deleteNamespacedPersistentVolumeClaim({ name, namespace });
  await tenant.custom.deleteNamespacedCustomObject({ ...DV, namespace, name: 'blk-root' });
  for (const pv of [blockPv, fsPv, rootPv])
    await poll(
      `${pv.metadata!.name!} deleted`,
      () => apiOutcome(() => admin.core.readPersistentVolume({ name: pv.metadata!.name! })),
      (r) => r.code === 404,
      { deadlineMs: 120_000 },
    );
}
