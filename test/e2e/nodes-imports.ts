// The DataVolume flow's (nodes-datavolume-flow.ts) import boundaries: on `vkvm up --nodes 2`, a
// claim with an import source (as the DataVolume controller annotates the
// claims it makes) is filled by the agent of the node that runs the VM,
// straight into the published volume, before the launcher starts; the node
// reports in the claim's status (a condition, provider/kubevirt/datavolume-report.ts),
// which the Node authorizer lets it write only for its own pods' claims and
// NodeRestriction only there. The tenant annotates its own claim here: that
// is safe, since the node imports only what the tenant could name as a
// containerDisk or URL image itself, with the pod's secrets and under the
// node's address policy.
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Test } from 'tap';
import { mergePatch, strategicMerge, type KubeClients } from '../../provider/kube/client.js';
import { importCondition, importReportOf } from '../../provider/kubevirt/datavolume-report.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
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

/** While a pod of `node` uses the tenant's imported claim `usedClaim`: what the node may write, and a node-local URL refused. */
export async function importBoundaries(
  t: Test,
  o: {
    admin: KubeClients;
    tenant: KubeClients;
    namespace: string;
    node: UpNode;
    /** The node's own identity (system:node:<name>). */
    nodeIdentity: KubeClients;
    bootDeadlineMs: number;
    usedClaim: string;
  },
): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const report = async (name: string) =>
    importReportOf((await tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace })).status?.conditions);

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
          { name: o.usedClaim, namespace, body: { metadata: { annotations: { [ENDPOINT]: 'http://169.254.169.254/' } } } },
          mergePatch,
        ),
      ),
    },
    { anotherClaim: { code: 403 }, anotherField: { code: 403, message: /cannot patch resource "persistentvolumeclaims"/ } },
    `node ${node.name} may write neither a claim none of its pods uses nor anything but a claim's status`,
  );
  t.equal((await report(o.usedClaim))?.phase, 'Succeeded', 'the refused writes changed nothing');

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

  await tenant.custom.deleteNamespacedCustomObject({ ...KV, namespace, name: 'vmi-dv-local' });
  await waitForGone(pods(admin, namespace, { labelSelector: `kubevirt.io/created-by=${refused.metadata.uid}` }), { deadlineMs: 120_000 });
  for (const name of ['dv-unused', 'dv-local']) await tenant.core.deleteNamespacedPersistentVolumeClaim({ name, namespace });
}
