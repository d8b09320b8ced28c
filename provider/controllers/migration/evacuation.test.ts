import t from 'tap';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { nextEvacuationStep, type EvacuationView } from './evacuation.js';

const vmi = (o: { evacuation?: string; node?: string; phase?: string; migratable?: boolean } = {}): VirtualMachineInstance => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vmi-1' },
  spec: { domain: {} },
  status: {
    phase: (o.phase ?? 'Running') as never,
    nodeName: o.node ?? 'a',
    ...(o.evacuation === '' ? {} : { evacuationNodeName: o.evacuation ?? 'a' }),
    conditions: [{ type: 'LiveMigratable', status: o.migratable === false ? 'False' : 'True' }],
  },
});
const vmim = (name: string, phase: string, o: { cordoned?: boolean; evacuation?: boolean; createdS?: number } = {}) =>
  ({
    metadata: {
      name,
      namespace: 'ns',
      creationTimestamp: new Date(Date.UTC(2026, 10, 27, 12, 0, o.createdS ?? 0)).toISOString(),
      annotations: {
        ...(o.evacuation === false ? {} : { 'kubevirt.io/evacuationMigration': 'a' }),
        ...(o.cordoned ? { 'vkvm.io/evacuation-node-cordoned': 'true' } : {}),
      },
    },
    spec: { vmiName: 'vm' },
    ...(phase ? { status: { phase } } : {}),
  }) as VirtualMachineInstanceMigration;

const view = (o: Partial<EvacuationView> = {}): EvacuationView => ({
  vmi: vmi(),
  strategy: 'LiveMigrate',
  nodeCordoned: true,
  migrations: [],
  activePods: 1,
  ...o,
});

t.test('a marked VMI is migrated off its node, canceled by an uncordon before it starts, and unmarked once it left', async (t) => {
  const cases: Array<[string, EvacuationView, object]> = [
    ['not marked', view({ vmi: vmi({ evacuation: '' }) }), { kind: 'none' }],
    ['marked on a cordoned node', view(), { kind: 'migrate', node: 'a', cordoned: true }],
    ['marked on a schedulable node (an eviction without a drain)', view({ nodeCordoned: false }), { kind: 'migrate', cordoned: false }],
    ['LiveMigrateIfPossible', view({ strategy: 'LiveMigrateIfPossible' }), { kind: 'migrate' }],
    ['External: someone else moves it', view({ strategy: 'External' }), { kind: 'none', why: /External/ }],
    ['None (changed since the eviction)', view({ strategy: 'None' }), { kind: 'none' }],
    ['already migrating', view({ migrations: [vmim('m1', 'Running', { evacuation: false })] }), { kind: 'none', why: /in flight/ }],
    ['its evacuation VMIM exists', view({ migrations: [vmim('e1', 'Pending', { cordoned: true })] }), { kind: 'none' }],
    [
      'after a failed one, another (the migration controller backs it off)',
      view({ migrations: [vmim('e1', 'Failed', { cordoned: true })] }),
      { kind: 'migrate' },
    ],
    ['no longer live-migratable', view({ vmi: vmi({ migratable: false }) }), { kind: 'none', why: /not live-migratable/ }],
    ["an earlier migration's target pod still going", view({ activePods: 2 }), { kind: 'none' }],
    ['the VMI is ending', view({ vmi: vmi({ phase: 'Failed' }) }), { kind: 'none' }],
    ['it moved: the mark is cleared', view({ vmi: vmi({ node: 'b' }) }), { kind: 'clear' }],
    [
      'uncordoned while Pending or Scheduling: canceled',
      view({
        nodeCordoned: false,
        migrations: [vmim('e0', 'Failed', { cordoned: true, createdS: 0 }), vmim('e1', 'Scheduling', { cordoned: true, createdS: 30 })],
      }),
      { kind: 'cancel', deleteVmims: ['e1'] },
    ],
    [
      'uncordoned while a failed one backs off: canceled, nothing to delete',
      view({ nodeCordoned: false, migrations: [vmim('e1', 'Failed', { cordoned: true })] }),
      { kind: 'cancel', deleteVmims: [] },
    ],
    [
      'uncordoned after the migration started: it finishes',
      view({ nodeCordoned: false, migrations: [vmim('e1', 'Running', { cordoned: true })] }),
      { kind: 'none', why: /has started/ },
    ],
    [
      'a schedulable node whose evacuation began schedulable: not a cancel',
      view({ nodeCordoned: false, migrations: [vmim('e1', 'Pending')] }),
      { kind: 'none', why: /in flight/ },
    ],
  ];
  for (const [name, v, want] of cases) t.match(nextEvacuationStep(v), want, name);
});
