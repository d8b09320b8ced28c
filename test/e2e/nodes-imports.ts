// The multi-node suite's (multi-node/nodes.ts) DataVolume import subtests: on `vkvm up --nodes 2`, a
// tenant's claim annotated with an import source (as the DataVolume
// controller annotates the claims it makes) is filled by the agent of the
// node that runs the VM, straight into the published volume, before the
// launcher starts; the node reports in the claim's status (a condition,
// provider/kubevirt/datavolume-report.ts), which the Node authorizer lets it
// write only for its own pods' claims and NodeRestriction only there. The tenant annotates its own
// claim here: that is safe, since the node imports only what the tenant
// could name as a containerDisk or URL image itself, with the pod's pull
// secrets and under the node's address policy.
import { join } from 'node:path';
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Test } from 'tap';
import { mergePatch, strategicMerge, type KubeClients } from '../../provider/kube/client.js';
import { importCondition, importReportOf } from '../../provider/kubevirt/datavolume-report.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import {
  apiOutcome,
  pods,
  poll,
  smokeVmiSpec,
  virtualMachineInstances,
  vmiOf,
  waitFor,
  waitForGone,
  type UpNode,
} from './framework/index.js';

const SOURCE = 'cdi.kubevirt.io/storage.import.source';
const ENDPOINT = 'cdi.kubevirt.io/storage.import.endpoint';
const KV = { group: 'kubevirt.io', version: 'v1', plural: 'virtualmachineinstances' };

const claim = (name: string, annotations: Record<string, string>): V1PersistentVolumeClaim => ({
  metadata: { name, annotations },
  spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '64Mi' } } },
});

/** The smoke VMI booting from `claimName` where it has its containerDisk, pinned to `node`. */
function vmiOnClaim(name: string, claimName: string, node: string) {
  const spec = smokeVmiSpec();
  spec.nodeSelector = { 'kubernetes.io/hostname': node };
  const devices = spec.domain.devices!;
  devices.disks = devices.disks!.map((d) => (d.name === 'containerdisk' ? { ...d, name: 'root' } : d));
  spec.volumes = spec.volumes!.map((v) => (v.name === 'containerdisk' ? { name: 'root', persistentVolumeClaim: { claimName } } : v));
  return vmiOf(name, spec);
}

export async function importedRootDisks(
  t: Test,
  o: {
    admin: KubeClients;
    tenant: KubeClients;
    namespace: string;
    /** The node the VMs run on, and its own identity (system:node:<name>). */
    node: UpNode;
    nodeIdentity: KubeClients;
    upStateDir: string;
    bootDeadlineMs: number;
  },
): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const stateDir = node.simulated?.stateDir ?? o.upStateDir;
  const report = async (name: string) =>
    importReportOf((await tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace })).status?.conditions);
  const runVmi = async (name: string, claimName: string) => {
    await tenant.custom.createNamespacedCustomObject({ ...KV, namespace, body: vmiOnClaim(name, claimName, node.name) });
    const vmi: VirtualMachineInstance = await waitFor(
      virtualMachineInstances(admin, namespace, { name }),
      (v) => v.status?.phase === 'Running' || v.status?.phase === 'Failed',
      { what: 'Running', deadlineMs: o.bootDeadlineMs },
    );
    const [launcher] = (await admin.core.listNamespacedPod({ namespace, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` }))
      .items;
    const pv = (await tenant.core.readNamespacedPersistentVolumeClaim({ name: claimName, namespace })).spec?.volumeName ?? '';
    const mount = join(stateDir, 'pods', launcher!.metadata!.uid!, 'volumes', 'kubernetes.io~csi', pv, 'mount');
    return {
      vmi,
      marker: (await node.exec(['cat', join(mount, '.vkvm-imported')])).stdout,
      disk: (await node.exec(['stat', '-c', '%s', join(mount, 'disk.img')])).stdout.trim(),
    };
  };
  const removeVmi = async (vmi: VirtualMachineInstance) => {
    await tenant.custom.deleteNamespacedCustomObject({ ...KV, namespace, name: vmi.metadata.name! });
    await waitForGone(pods(admin, namespace, { labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` }), { deadlineMs: 120_000 });
  };

  await tenant.core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: claim('dv-root', { [SOURCE]: 'registry', [ENDPOINT]: `docker://${TEST_GUEST_IMAGE}` }),
  });
  const first = await runVmi('vmi-dv-1', 'dv-root');
  t.match(
    {
      phase: first.vmi.status?.phase,
      node: first.vmi.status?.nodeName,
      report: await report('dv-root'),
      marker: first.marker,
      disk: first.disk,
    },
    {
      phase: 'Running',
      node: node.name,
      report: { phase: 'Succeeded', progress: '100.00%' },
      marker: /"importedAt"/,
      disk: String(64 * 2 ** 20),
    },
    `a VM boots from a claim imported from ${TEST_GUEST_IMAGE} on ${node.name}, grown to the claim's size; the claim says Succeeded, 100.00%`,
  );
  await removeVmi(first.vmi);
  const second = await runVmi('vmi-dv-2', 'dv-root');
  t.match(
    { phase: second.vmi.status?.phase, marker: second.marker, report: await report('dv-root') },
    { phase: 'Running', marker: first.marker, report: { phase: 'Succeeded' } },
    'a second VM on the claim boots without a second import (the same marker)',
  );

  // The node writes only its own pods' claims, and only their status conditions.
  await tenant.core.createNamespacedPersistentVolumeClaim({ namespace, body: claim('dv-unused', {}) });
  const asNode = o.nodeIdentity.core;
  const condition = { status: { conditions: [importCondition('Failed', 0, 'forged', new Date())] } };
  t.match(
    {
      anotherClaim: await apiOutcome(() =>
        asNode.patchNamespacedPersistentVolumeClaimStatus({ name: 'dv-unused', namespace, body: condition }, strategicMerge),
      ),
      anotherField: await apiOutcome(() =>
        asNode.patchNamespacedPersistentVolumeClaim(
          { name: 'dv-root', namespace, body: { metadata: { annotations: { [ENDPOINT]: 'http://169.254.169.254/' } } } },
          mergePatch,
        ),
      ),
    },
    { anotherClaim: { code: 403 }, anotherField: { code: 403, message: /cannot patch resource "persistentvolumeclaims"/ } },
    `node ${node.name} may write neither a claim none of its pods uses nor anything but a claim's status`,
  );
  t.equal((await report('dv-root'))?.phase, 'Succeeded', 'the refused writes changed nothing');

  // A URL at a node-local service is refused, naming the field, on the claim and on the VMI.
  await tenant.core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: claim('dv-local', { [SOURCE]: 'http', [ENDPOINT]: 'http://127.0.0.1:10255/disk.img' }),
  });
  await tenant.custom.createNamespacedCustomObject({ ...KV, namespace, body: vmiOnClaim('vmi-dv-local', 'dv-local', node.name) });
  const refused: VirtualMachineInstance = await waitFor(
    virtualMachineInstances(admin, namespace, { name: 'vmi-dv-local' }),
    (v) => v.status?.conditions?.some((c) => c.type === 'Synchronized' && c.status === 'False') ?? false,
    { what: 'Synchronized False', deadlineMs: o.bootDeadlineMs },
  );
  const failedReport = await poll(
    'the claim to say Failed',
    () => report('dv-local'),
    (r) => r?.phase === 'Failed',
  );
  const why = /cdi\.kubevirt\.io\/storage\.import\.endpoint: .*refused: .*loopback/;
  t.match(
    { vmi: refused.status?.conditions?.find((c) => c.type === 'Synchronized'), report: failedReport },
    {
      vmi: { status: 'False', reason: 'CreateContainerError', message: new RegExp(`claim "dv-local": import failed: ${why.source}`) },
      report: { phase: 'Failed', message: why },
    },
    'an http source at the node itself is refused naming the field; the VMI says why and does not start',
  );

  for (const vmi of [second.vmi, refused]) await removeVmi(vmi);
  for (const name of ['dv-root', 'dv-unused', 'dv-local']) await tenant.core.deleteNamespacedPersistentVolumeClaim({ name, namespace });
}
