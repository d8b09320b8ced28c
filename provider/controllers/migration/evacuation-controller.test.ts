import t from 'tap';
import { pino } from 'pino';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { EventRecorder } from '../../kube/events.js';
import type { ClusterInformer } from '../../kube/informer.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { EvacuationController } from './evacuation-controller.js';

function cache<T extends { metadata?: { name?: string; namespace?: string } }>(items: T[]) {
  const key = (o: T) => (o.metadata?.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata!.name!);
  const map = new Map(items.map((o) => [key(o), o]));
  return {
    map,
    put: (o: T) => map.set(key(o), o),
    informer: { get: (k: string) => map.get(k), list: () => [...map.values()], onChange: () => undefined } as unknown as ClusterInformer<T>,
  };
}

t.test('a marked VMI gets one evacuation VMIM; an uncordon deletes it while Pending and clears the mark', async (t) => {
  const vmis = cache<VirtualMachineInstance>([
    {
      metadata: { name: 'vm', namespace: 'ns', uid: 'vmi-uid', resourceVersion: '7' },
      spec: { domain: {}, evictionStrategy: 'LiveMigrate' },
      status: { phase: 'Running', nodeName: 'a', evacuationNodeName: 'a', conditions: [{ type: 'LiveMigratable', status: 'True' }] },
    },
  ]);
  const vmims = cache<VirtualMachineInstanceMigration>([]);
  const apiVmims: VirtualMachineInstanceMigration[] = [];
  const nodes = cache<V1Node>([{ metadata: { name: 'a' }, spec: { unschedulable: true } }]);
  const pods = cache<V1Pod>([
    {
      metadata: { name: 'virt-launcher-vm-x', namespace: 'ns', labels: { 'kubevirt.io/created-by': 'vmi-uid' } },
      status: { phase: 'Running' },
    },
  ]);
  const calls: unknown[] = [];
  const events: string[] = [];
  const kubevirt = {
    listVmims: async () => ({ items: apiVmims }),
    createVmim: async (m: VirtualMachineInstanceMigration) => {
      const created = { ...m, metadata: { ...m.metadata, name: 'kubevirt-evacuation-abc', uid: 'm-uid' } };
      apiVmims.push(created);
      calls.push(['create', created.metadata]);
      return created;
    },
    deleteVmim: async (...args: unknown[]) => void calls.push(['delete', ...args]),
    patchStatus: async (...args: unknown[]) => void calls.push(['patchStatus', ...args]),
  } as unknown as KubevirtApi;
  const controller = new EvacuationController({
    kubevirt,
    vmis: vmis.informer,
    vmims: vmims.informer,
    pods: pods.informer,
    nodes: nodes.informer,
    evictionStrategy: 'None',
    events: { record: () => undefined, recordFor: (_o, _t, reason) => void events.push(reason) } as EventRecorder,
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => controller.stop());

  await controller.syncEvacuation('ns/vm');
  await controller.syncEvacuation('ns/vm'); // the cache has not seen the create yet
  t.same(calls, [
    [
      'create',
      {
        generateName: 'kubevirt-evacuation-',
        namespace: 'ns',
        labels: { 'kubevirt.io/vmi-name': 'vm' },
        annotations: { 'kubevirt.io/evacuationMigration': 'a', 'vkvm.io/evacuation-node-cordoned': 'true' },
        name: 'kubevirt-evacuation-abc',
        uid: 'm-uid',
      },
    ],
  ]);

  vmims.put({ ...apiVmims[0]!, status: { phase: 'Pending' } });
  nodes.put({ metadata: { name: 'a' }, spec: {} });
  calls.length = 0;
  await controller.syncEvacuation('ns/vm');
  t.same(calls, [
    ['delete', 'ns', 'kubevirt-evacuation-abc', 'm-uid'],
    ['patchStatus', 'virtualmachineinstances', 'ns', 'vm', '7', { evacuationNodeName: null }],
  ]);
  t.same(events, ['SuccessfulCreate', 'EvacuationCanceled']);
});
