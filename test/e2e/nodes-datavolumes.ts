// The multi-node suite's (multi-node/nodes.ts) DataVolume boundaries: on `vkvm up --nodes 2`, vkvm serves
// cdi.kubevirt.io DataVolumes (no CDI installed). Without a VM: a blank
// DataVolume waits for its first consumer with CDI's phases and conditions
// and a claim of its own; the tenant cannot write DataVolume status, a field
// vkvm does not serve is refused at admission. A clone from another namespace
// is nodes-clone-source.ts; the VM flow (boot, marker, restarts, clone,
// snapshot) is nodes-datavolume-flow.ts.
import type { Test } from 'tap';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import type { DataVolume } from '../../provider/kubevirt/datavolume-types.js';
import { apiOutcome, dataVolumes, persistentVolumeClaims, waitFor, waitForGone } from './framework/index.js';

const DV = { group: 'cdi.kubevirt.io', version: 'v1beta1', plural: 'datavolumes' };
const SIZE = '48Mi';
const DEADLINE_MS = 120_000;

interface Options {
  tenant: KubeClients;
  namespace: string;
}

const blank = (name: string, extra: Partial<DataVolume['spec']> = {}): DataVolume => ({
  apiVersion: 'cdi.kubevirt.io/v1beta1',
  kind: 'DataVolume',
  metadata: { name },
  spec: { source: { blank: {} }, storage: { resources: { requests: { storage: SIZE } } }, ...extra },
});

/** Statuses, conditions and tenant boundaries a DataVolume shows without a VM. */
export async function dataVolumeBoundaries(t: Test, o: Options): Promise<void> {
  const { tenant, namespace } = o;
  const create = (dv: DataVolume) => tenant.custom.createNamespacedCustomObject({ ...DV, namespace, body: dv });

  await create(blank('dv-wait'));
  const waiting = await waitFor(dataVolumes(tenant, namespace, { name: 'dv-wait' }), (d) => d.status?.phase === 'WaitForFirstConsumer', {
    what: 'WaitForFirstConsumer',
    deadlineMs: DEADLINE_MS,
  });
  const claim = await tenant.core.readNamespacedPersistentVolumeClaim({ name: 'dv-wait', namespace });
  t.match(
    {
      status: waiting.status,
      claim: {
        phase: claim.status?.phase,
        class: claim.spec?.storageClassName,
        annotations: claim.metadata?.annotations,
        owner: claim.metadata?.ownerReferences,
      },
    },
    {
      status: {
        phase: 'WaitForFirstConsumer',
        progress: 'N/A',
        claimName: 'dv-wait',
        conditions: [
          { type: 'Bound', status: 'False', reason: 'Pending', message: 'PVC dv-wait Pending' },
          { type: 'Ready', status: 'False' },
          { type: 'Running', status: 'False' },
        ],
      },
      claim: {
        phase: 'Pending',
        class: 'vkvm-local',
        annotations: { 'cdi.kubevirt.io/storage.import.source': 'none' },
        owner: [{ kind: 'DataVolume', name: 'dv-wait', controller: true }],
      },
    },
    'a blank DataVolume nothing uses waits for its first consumer; its claim is its own, of the default class, source none',
  );

  t.match(
    await apiOutcome(() =>
      tenant.custom.patchNamespacedCustomObjectStatus(
        { ...DV, namespace, name: 'dv-wait', body: { status: { phase: 'Succeeded' } } },
        mergePatch,
      ),
    ),
    { code: 403 },
    'the tenant cannot write DataVolume status',
  );
  t.match(
    await apiOutcome(() => create(blank('dv-ca', { source: { http: { url: 'https://example.com/d.img', certConfigMap: 'ca' } } }))),
    { code: 422, message: /spec\.source\.http\.certConfigMap: a custom CA is not supported/ },
    'a field vkvm does not serve is refused at admission, named',
  );

  await tenant.custom.deleteNamespacedCustomObject({ ...DV, namespace, name: 'dv-wait' });
  await waitForGone(persistentVolumeClaims(tenant, namespace, { name: 'dv-wait' }), { deadlineMs: DEADLINE_MS });
}
