import t from 'tap';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { claimExpansion, claimMayExpand, diskImageGrowth } from './expansion-plan.js';

const pv = (storage: string) => ({ spec: { capacity: { storage } } }) as V1PersistentVolume;
const pvc = (status: V1PersistentVolumeClaim['status']) => ({ metadata: { resourceVersion: '42' }, status }) as V1PersistentVolumeClaim;
const pending = { type: 'FileSystemResizePending', status: 'True' };
const imported = { type: 'vkvm.io/DataVolumeImport', status: 'True', reason: 'Succeeded' };

t.test('claimExpansion: the node expands when the claim or the PV says so, and reports as the kubelet does', async (t) => {
  const cases: Array<[string, V1PersistentVolume, V1PersistentVolumeClaim, unknown]> = [
    ['sizes agree, nothing marked', pv('128Mi'), pvc({ phase: 'Bound', capacity: { storage: '128Mi' } }), { kind: 'none' }],
    ['not bound', pv('256Mi'), pvc({ phase: 'Pending', capacity: { storage: '128Mi' } }), { kind: 'none' }],
    [
      'the resizer marked it (trivial resizer): grow to the PV, capacity follows, the condition and status go, others stay',
      pv('256Mi'),
      pvc({
        phase: 'Bound',
        capacity: { storage: '128Mi' },
        conditions: [pending, imported],
        allocatedResources: { storage: '256Mi' },
        allocatedResourceStatuses: { storage: 'NodeResizePending' },
      }),
      {
        kind: 'expand',
        toBytes: 256 * 2 ** 20,
        status: {
          metadata: { resourceVersion: '42' },
          status: { capacity: { storage: '256Mi' }, conditions: [imported], allocatedResourceStatuses: null },
        },
      },
    ],
    [
      'the PV is larger than the claim says, unmarked (an agent that restarted after the condition went): expand',
      pv('1Gi'),
      pvc({ phase: 'Bound', capacity: { storage: '512Mi' } }),
      {
        kind: 'expand',
        toBytes: 2 ** 30,
        status: { status: { capacity: { storage: '1Gi' }, conditions: [], allocatedResourceStatuses: null } },
      },
    ],
    [
      'another resource keeps its allocation status',
      pv('256Mi'),
      pvc({
        phase: 'Bound',
        capacity: { storage: '128Mi' },
        allocatedResourceStatuses: { storage: 'NodeResizeInProgress', 'example.com/x': 'ControllerResizeInProgress' },
      }),
      {
        kind: 'expand',
        status: { status: { allocatedResourceStatuses: { storage: null, 'example.com/x': 'ControllerResizeInProgress' } } },
      },
    ],
  ];
  for (const [name, v, c, want] of cases) t.match(claimExpansion(v, c), want, name);
  t.same(claimExpansion(pv('128Mi'), pvc({ phase: 'Bound', capacity: { storage: '128Mi' } })), { kind: 'none' }, 'done is none exactly');
});

t.test('diskImageGrowth: disk.img grows to the claim in whole MiB, never shrinks', async (t) => {
  const MIB = 2 ** 20;
  t.same(
    [
      diskImageGrowth(128 * MIB, 256 * MIB),
      diskImageGrowth(256 * MIB, 256 * MIB),
      diskImageGrowth(300 * MIB, 256 * MIB),
      diskImageGrowth(0, 256 * MIB + 5),
    ],
    [256 * MIB, undefined, undefined, 256 * MIB],
  );
});

t.test('claimMayExpand: only a marked claim, or one requesting more than its status, costs a PV read', async (t) => {
  const claim = (o: { phase?: string; request?: string; capacity?: string; pending?: boolean; allocated?: string }) => ({
    spec: o.request ? { resources: { requests: { storage: o.request } } } : {},
    status: {
      phase: o.phase ?? 'Bound',
      ...(o.capacity ? { capacity: { storage: o.capacity } } : {}),
      ...(o.pending ? { conditions: [{ type: 'FileSystemResizePending', status: 'True' }] } : {}),
      ...(o.allocated ? { allocatedResourceStatuses: { storage: o.allocated } } : {}),
    },
  });
  t.same(
    {
      steady: claimMayExpand(claim({ request: '64Mi', capacity: '64Mi' })),
      asked: claimMayExpand(claim({ request: '96Mi', capacity: '64Mi' })),
      marked: claimMayExpand(claim({ request: '96Mi', capacity: '96Mi', pending: true })),
      nodePending: claimMayExpand(claim({ request: '64Mi', capacity: '64Mi', allocated: 'NodeResizePending' })),
      noStatusCapacity: claimMayExpand(claim({ request: '64Mi' })),
      pending: claimMayExpand(claim({ phase: 'Pending', request: '96Mi' })),
    },
    { steady: false, asked: true, marked: true, nodePending: true, noStatusCapacity: true, pending: false },
  );
});
