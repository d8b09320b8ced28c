import t from 'tap';
import type { DataVolume, DataVolumePhase } from '../kubevirt/datavolume-types.js';
import type { VirtualMachine } from '../kubevirt/types.js';
import { derivePrintableStatus } from './vm-status.js';
import { dataVolumesOf, dataVolumesState, vmKeyOfDataVolume } from './vm-datavolumes.js';

const vm = (runStrategy: 'Always' | 'Halted' = 'Always'): VirtualMachine => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
  spec: {
    runStrategy,
    dataVolumeTemplates: [
      {
        metadata: { name: 'root', labels: { os: 'x' } },
        spec: { source: { blank: {} }, storage: { resources: { requests: { storage: '1Gi' } } } },
      },
    ],
    template: { spec: { domain: { memory: { guest: '128Mi' } } } },
  },
});
const dv = (phase?: DataVolumePhase, readyMessage?: string): DataVolume => ({
  metadata: { name: 'root' },
  spec: { source: { blank: {} } },
  ...(phase
    ? { status: { phase, ...(readyMessage ? { conditions: [{ type: 'Ready', status: 'False', message: readyMessage }] } : {}) } }
    : {}),
});

t.test("a VM's templates become DataVolumes of their names, in its namespace, controlled by the VM", async (t) => {
  t.same(dataVolumesOf(vm()), [
    {
      apiVersion: 'cdi.kubevirt.io/v1beta1',
      kind: 'DataVolume',
      metadata: {
        name: 'root',
        namespace: 'ns',
        labels: { os: 'x' },
        ownerReferences: [
          { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: 'vm', uid: 'vm-uid', controller: true, blockOwnerDeletion: true },
        ],
      },
      spec: { source: { blank: {} }, storage: { resources: { requests: { storage: '1Gi' } } } },
    },
  ]);
});

t.test('the VMI is made once every DataVolume is done or waits for it (its first consumer); a failed one names itself', async (t) => {
  const cases: Array<[string, Array<DataVolume | undefined>, unknown]> = [
    ['not there yet', [undefined], { state: 'provisioning', waitingFor: 'root' }],
    ['no status yet', [dv()], { state: 'provisioning', waitingFor: 'root' }],
    ['Pending', [dv('Pending')], { state: 'provisioning', waitingFor: 'root' }],
    ['a clone in progress', [dv('CloneInProgress')], { state: 'provisioning', waitingFor: 'root' }],
    ['WaitForFirstConsumer: the VMI is its consumer', [dv('WaitForFirstConsumer')], { state: 'ready' }],
    ['ImportScheduled: the import runs on the VMI’s node', [dv('ImportScheduled')], { state: 'ready' }],
    ['Succeeded', [dv('Succeeded')], { state: 'ready' }],
    ['Failed', [dv('Failed', 'HTTP 404')], { state: 'failed', name: 'root', message: 'HTTP 404' }],
  ];
  for (const [name, dvs, want] of cases) t.same(dataVolumesState(dvs, ['root']), want, name);
});

t.test('printableStatus: Provisioning while a started VM waits for its DataVolumes, DataVolumeError when one failed', async (t) => {
  const now = new Date();
  t.equal(derivePrintableStatus({ vm: vm(), now, startExpected: false, dataVolumes: 'provisioning' }), 'Provisioning');
  t.equal(derivePrintableStatus({ vm: vm('Halted'), now, dataVolumes: 'provisioning' }), 'Stopped', 'a halted VM is Stopped');
  t.equal(derivePrintableStatus({ vm: vm(), now, startExpected: false, dataVolumes: 'failed' }), 'DataVolumeError');
});

t.test('a DataVolume wakes the VM that controls it, and nothing for any other owner', async (t) => {
  const dv = (ownerReferences?: NonNullable<DataVolume['metadata']['ownerReferences']>): DataVolume => ({
    apiVersion: 'cdi.kubevirt.io/v1beta1',
    kind: 'DataVolume',
    metadata: { name: 'root', namespace: 'ns', ...(ownerReferences ? { ownerReferences } : {}) },
    spec: { source: { blank: {} } },
  });
  const ref = { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: 'vm', uid: 'u' };
  t.same(
    [
      vmKeyOfDataVolume(dv([{ ...ref, controller: true }])),
      vmKeyOfDataVolume(dv([{ ...ref }])),
      vmKeyOfDataVolume(dv([{ ...ref, apiVersion: 'example.com/v1', controller: true }])),
      vmKeyOfDataVolume(dv()),
    ],
    ['ns/vm', undefined, undefined, undefined],
  );
});
