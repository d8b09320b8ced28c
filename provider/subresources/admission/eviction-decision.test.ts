import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import type { EvictionStrategy, VirtualMachineInstance } from '../../kubevirt/types.js';
import { evictionDecision } from './eviction-decision.js';

const migratable = { type: 'LiveMigratable', status: 'True' } as const;
const hostDisk = {
  type: 'LiveMigratable',
  status: 'False',
  reason: 'DisksNotLiveMigratable',
  message: 'hostDisk d1 is not shared',
} as const;

const vmi = (strategy: EvictionStrategy | undefined, condition?: typeof migratable | typeof hostDisk): VirtualMachineInstance => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vmi-1' },
  spec: { domain: {}, ...(strategy ? { evictionStrategy: strategy } : {}) },
  status: { phase: 'Running', nodeName: 'a', ...(condition ? { conditions: [condition] } : {}) },
});

const pod = (o: { node?: string; phase?: string; target?: boolean; launcher?: boolean } = {}): V1Pod => ({
  metadata: {
    name: 'virt-launcher-vm-x',
    namespace: 'ns',
    labels: {
      ...(o.launcher === false ? {} : { 'kubevirt.io': 'virt-launcher' }),
      ...(o.target ? { 'kubevirt.io/migrationJobUID': 'm1' } : {}),
    },
  },
  spec: { nodeName: o.node ?? 'a', containers: [] },
  status: { phase: o.phase ?? 'Running' },
});

const evacuate = { allowed: false, message: 'Eviction triggered evacuation of VMI "ns/vm"', evacuateFrom: 'a' };
const blocked = {
  allowed: false,
  message: 'VMI ns/vm has evictionStrategy LiveMigrate but is not live-migratable: DisksNotLiveMigratable: hostDisk d1 is not shared',
  blocked: true,
};

t.test('an eviction is allowed, refused while the VM migrates away, or blocked with the reason, by evictionStrategy', async (t) => {
  const cases: Array<[string, ReturnType<typeof evictionDecision>, object]> = [
    ['not a launcher pod', evictionDecision(vmi('LiveMigrate'), pod({ launcher: false }), 'None'), { allowed: true }],
    ['a pod that ended', evictionDecision(vmi('LiveMigrate', hostDisk), pod({ phase: 'Succeeded' }), 'None'), { allowed: true }],
    ['the VMI is gone', evictionDecision(undefined, pod(), 'LiveMigrate'), { allowed: true }],
    ['None (the cluster default)', evictionDecision(vmi(undefined, migratable), pod(), 'None'), { allowed: true }],
    ['None on the VMI overrides the cluster', evictionDecision(vmi('None', migratable), pod(), 'LiveMigrate'), { allowed: true }],
    ['LiveMigrate, migratable', evictionDecision(vmi('LiveMigrate', migratable), pod(), 'None'), evacuate],
    ['the cluster default LiveMigrate', evictionDecision(vmi(undefined, migratable), pod(), 'LiveMigrate'), evacuate],
    ['LiveMigrate, not migratable', evictionDecision(vmi('LiveMigrate', hostDisk), pod(), 'None'), blocked],
    [
      'LiveMigrate, migratability not reported yet',
      evictionDecision(vmi('LiveMigrate'), pod(), 'None'),
      { allowed: false, blocked: true, message: /not live-migratable: its node has not reported/ },
    ],
    ['LiveMigrateIfPossible, migratable', evictionDecision(vmi('LiveMigrateIfPossible', migratable), pod(), 'None'), evacuate],
    ['LiveMigrateIfPossible, not migratable', evictionDecision(vmi('LiveMigrateIfPossible', hostDisk), pod(), 'None'), { allowed: true }],
    ['External', evictionDecision(vmi('External', hostDisk), pod(), 'None'), evacuate],
    [
      'a migration target pod, whatever the strategy',
      evictionDecision(vmi('None', migratable), pod({ node: 'b', target: true }), 'None'),
      { allowed: false, message: 'Eviction request for target Pod' },
    ],
    [
      'a former target pod the VMI now runs in',
      evictionDecision(vmi('LiveMigrate', migratable), pod({ node: 'a', target: true }), 'None'),
      evacuate,
    ],
  ];
  for (const [name, got, want] of cases) {
    t.match(got, want, name);
    if (!('blocked' in want)) t.notOk('blocked' in got && got.blocked, `${name}: not blocked`);
    if (!('evacuateFrom' in want)) t.notOk('evacuateFrom' in got, `${name}: no evacuation`);
  }
});
