import t from 'tap';
import { FakeInstancetypeStore } from '../../test/helpers/fake-instancetype-store.js';
import { InstancetypeRefusal, Instancetypes } from './instancetypes.js';
import { matcherKind, syncStatusRef } from '../kubevirt/instancetype/revision.js';
import type { VirtualMachine } from '../kubevirt/types.js';

const vm = (spec: Partial<VirtualMachine['spec']>, status?: VirtualMachine['status']): VirtualMachine => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
  spec: { runStrategy: 'Always', template: { spec: { domain: {} } }, ...spec },
  ...(status ? { status } : {}),
});

function setup() {
  const store = new FakeInstancetypeStore();
  store.put('VirtualMachineClusterInstancetype', '', 'u1.nano', { cpu: { guest: 1 }, memory: { guest: '512Mi' } });
  store.put('VirtualMachineInstancetype', 'other', 'private', { cpu: { guest: 1 }, memory: { guest: '256Mi' } });
  store.put('VirtualMachinePreference', 'ns', 'mine', { devices: { preferredDiskBus: 'virtio' } });
  return { store, instancetypes: new Instancetypes(store) };
}

t.test(
  'the first sync stores a revision per matcher, named as KubeVirt names it; an edit of the instancetype changes nothing after',
  async (t) => {
    const { store, instancetypes } = setup();
    const first = await instancetypes.sync(
      vm({ instancetype: { name: 'u1.nano' }, preference: { name: 'mine', kind: 'VirtualMachinePreference' } }),
    );
    t.same(first.refs, {
      instancetypeRef: { name: 'u1.nano', controllerRevisionRef: { name: 'vm-u1.nano-v1beta1-uid-1-1' } },
      preferenceRef: { name: 'mine', kind: 'VirtualMachinePreference', controllerRevisionRef: { name: 'vm-mine-v1beta1-uid-3-1' } },
    });
    t.match([...store.revisions.values()][0], {
      metadata: {
        namespace: 'ns',
        ownerReferences: [{ kind: 'VirtualMachine', name: 'vm', uid: 'vm-uid', controller: true }],
        labels: {
          'instancetype.kubevirt.io/object-name': 'u1.nano',
          'instancetype.kubevirt.io/object-kind': 'VirtualMachineClusterInstancetype',
        },
      },
      data: {
        apiVersion: 'instancetype.kubevirt.io/v1beta1',
        kind: 'VirtualMachineClusterInstancetype',
        spec: { memory: { guest: '512Mi' } },
      },
    });
    store.put('VirtualMachineClusterInstancetype', '', 'u1.nano', { cpu: { guest: 2 }, memory: { guest: '1Gi' } });
    const pinned = vm({ instancetype: { name: 'u1.nano' }, preference: { name: 'mine', kind: 'VirtualMachinePreference' } }, first.refs);
    const again = await instancetypes.sync(pinned);
    t.same(again.refs, first.refs, 'the refs stay');
    t.match(
      again.expanded,
      { ok: true, template: { spec: { domain: { memory: { guest: '512Mi' }, cpu: { sockets: 1 } } } } },
      'expanded from the revision',
    );
    t.equal(store.revisions.size, 2, 'no new revision');
    const renamed = await instancetypes.sync({
      ...pinned,
      spec: { ...pinned.spec, instancetype: { name: 'u1.nano', kind: 'virtualmachineclusterinstancetypes' } },
    });
    t.match(
      renamed.refs.instancetypeRef,
      { controllerRevisionRef: { name: 'vm-u1.nano-v1beta1-uid-1-2' } },
      'a new kind spelling is a new matcher: the current object is stored',
    );
  },
);

t.test(
  "refusals name the field: another namespace's instancetype is not found in the VM's; a stranger's revision holds none",
  async (t) => {
    const { store, instancetypes } = setup();
    store.revisions.set('ns/sts-rev', {
      apiVersion: 'apps/v1',
      kind: 'ControllerRevision',
      metadata: { name: 'sts-rev' },
      data: { spec: {} },
      revision: 1,
    });
    const refusal = async (v: VirtualMachine) => {
      try {
        await instancetypes.sync(v);
        return undefined;
      } catch (err) {
        return err instanceof InstancetypeRefusal ? { message: err.message, retry: err.retry } : err;
      }
    };
    t.same(
      [
        await refusal(vm({ instancetype: { name: 'private', kind: 'VirtualMachineInstancetype' } })),
        await refusal(vm({ instancetype: { name: 'u1.nano', kind: 'VirtualMachinePreference' } })),
        await refusal(vm({ instancetype: { name: 'u1.nano', revisionName: 'sts-rev' } })),
      ],
      [
        { message: 'spec.instancetype: VirtualMachineInstancetype private not found in namespace ns', retry: true },
        { message: 'spec.instancetype.kind: got unexpected kind in instancetype matcher: VirtualMachinePreference', retry: false },
        {
          message: 'spec.instancetype.revisionName: ControllerRevision sts-rev: it holds no instancetype of instancetype.kubevirt.io',
          retry: false,
        },
      ],
    );
  },
);

t.test('inferFromVolume takes the matcher from the claim labels; Ignore drops what cannot be inferred', async (t) => {
  const { store, instancetypes } = setup();
  store.claims.set('ns/root', {
    'instancetype.kubevirt.io/default-instancetype': 'u1.nano',
    'instancetype.kubevirt.io/default-preference': 'alpine',
  });
  const volumes = [
    { name: 'root', persistentVolumeClaim: { claimName: 'root' } },
    { name: 'cd', containerDisk: { image: 'img' } },
  ];
  const withVolumes = (spec: Partial<VirtualMachine['spec']>) =>
    vm({ ...spec, template: { spec: { domain: { memory: { guest: '1Gi' } }, volumes } } });
  t.same(
    await instancetypes.inference(
      withVolumes({
        instancetype: { inferFromVolume: 'root', inferFromVolumeFailurePolicy: 'Ignore' },
        preference: { inferFromVolume: 'root' },
      }),
    ),
    {
      instancetype: { name: 'u1.nano', kind: null, inferFromVolume: null, inferFromVolumeFailurePolicy: null, revisionName: null },
      template: { spec: { domain: { memory: null } } },
      preference: { name: 'alpine', kind: null, inferFromVolume: null, inferFromVolumeFailurePolicy: null, revisionName: null },
    },
  );
  t.same(
    await instancetypes.inference(withVolumes({ instancetype: { inferFromVolume: 'cd', inferFromVolumeFailurePolicy: 'Ignore' } })),
    { instancetype: null },
    'virtctl create vm --volume-containerdisk: an implicit inference that cannot work is dropped',
  );
  await t.rejects(instancetypes.inference(withVolumes({ instancetype: { inferFromVolume: 'cd' } })), {
    message: 'spec.instancetype.inferFromVolume: unable to infer defaults from volume cd as type is not supported',
  });
  t.equal(await instancetypes.inference(vm({ instancetype: { name: 'u1.nano' } })), undefined, 'nothing to infer');
});

t.test('matcher kinds and status refs, as KubeVirt reads them', async (t) => {
  t.same(
    ['', 'VirtualMachineInstancetype', 'virtualmachineclusterinstancetypes', 'VirtualMachinePreference'].map((k) =>
      matcherKind('instancetype', k),
    ),
    ['VirtualMachineClusterInstancetype', 'VirtualMachineInstancetype', 'VirtualMachineClusterInstancetype', undefined],
  );
  const stored = { name: 'a', controllerRevisionRef: { name: 'rev-a' } };
  t.same(
    [
      syncStatusRef({ name: 'a' }, stored),
      syncStatusRef({ name: 'b' }, stored),
      syncStatusRef({ name: 'a', revisionName: 'pinned' }, stored),
    ],
    [stored, { name: 'b' }, { name: 'a', controllerRevisionRef: { name: 'pinned' } }],
    'kept; dropped when the name changes; set by revisionName',
  );
});
