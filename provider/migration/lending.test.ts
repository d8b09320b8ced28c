import t from 'tap';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { LentLease } from '../network/ipam.js';
import { lentVmiNode } from './lending.js';

const T0 = '2026-11-27T10:00:00Z';
const lease = (node: string): LentLease => ({ node, since: T0, vmi: { namespace: 'ns', name: 'vm', uid: 'u1' } });
const vmi = (status: VirtualMachineInstance['status'], uid = 'u1'): VirtualMachineInstance =>
  ({ metadata: { namespace: 'ns', name: 'vm', uid }, spec: { domain: {} }, status }) as unknown as VirtualMachineInstance;
const migration = (sourceNode: string, targetNode: string, more: Record<string, unknown> = {}) => ({
  migrationUid: 'm1',
  sourceNode,
  targetNode,
  ...more,
});

t.test('a home node lends an address to where the VMI says its VM runs, trusting only the controllers’ fields', async (t) => {
  const cases: Array<[string, VirtualMachineInstance | undefined, LentLease, string | null]> = [
    ['the VMI is gone: lent to nobody', undefined, lease('b'), null],
    ['a VMI of the same name but another uid: lent to nobody', vmi({ nodeName: 'b', phase: 'Running' }, 'u2'), lease('b'), null],
    ['a lease that names no VMI: nothing to follow', vmi({ nodeName: 'b' }), { node: 'b', since: T0 }, null],
    ['the VMI finished (Succeeded)', vmi({ nodeName: 'b', phase: 'Succeeded' }), lease('b'), null],
    ['the VMI failed (its node was lost after the commit)', vmi({ nodeName: 'b', phase: 'Failed' }), lease('b'), null],
    [
      'moved to b and settled: b',
      vmi({ nodeName: 'b', phase: 'Running', migrationState: migration('h', 'b', { completed: true }) }),
      lease('b'),
      'b',
    ],
    [
      'the home handed over to b before the controllers copied the commit: still b',
      vmi({ nodeName: 'h', phase: 'Running', migrationState: migration('h', 'b', { startTimestamp: T0 }) }),
      lease('b'),
      'b',
    ],
    [
      'chain h→b→c, under way: still b (the VM runs on b until the commit)',
      vmi({ nodeName: 'b', phase: 'Running', migrationState: migration('b', 'c', { startTimestamp: T0 }) }),
      lease('b'),
      'b',
    ],
    [
      'chain h→b→c, committed (endTimestamp, not failed): c, before the VMI’s node flips',
      vmi({ nodeName: 'b', phase: 'Running', migrationState: migration('b', 'c', { endTimestamp: T0 }) }),
      lease('b'),
      'c',
    ],
    [
      'chain h→b→c, failed: b',
      vmi({ nodeName: 'b', phase: 'Running', migrationState: migration('b', 'c', { endTimestamp: T0, failed: true }) }),
      lease('b'),
      'b',
    ],
    [
      'chain h→b→c, completed: c',
      vmi({ nodeName: 'c', phase: 'Running', migrationState: migration('b', 'c', { endTimestamp: T0, completed: true }) }),
      lease('b'),
      'c',
    ],
    [
      'back home c→h, committed: h (the home’s claim then adopts the lease)',
      vmi({ nodeName: 'c', phase: 'Running', migrationState: migration('c', 'h', { endTimestamp: T0 }) }),
      lease('c'),
      'h',
    ],
    [
      'a lease naming a node the migration does not: the VMI’s node',
      vmi({ nodeName: 'b', phase: 'Running', migrationState: migration('b', 'c') }),
      lease('x'),
      'b',
    ],
    ['no migration state: the VMI’s node', vmi({ nodeName: 'c', phase: 'Running' }), lease('b'), 'c'],
  ];
  for (const [name, v, l, want] of cases) t.equal(lentVmiNode(v, l), want, name);
});
