import t from 'tap';
import type { VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { slotRefusal } from './slots.js';

const m = (name: string, phase: string, node: string, created = '2026-01-01T00:00:10Z'): VirtualMachineInstanceMigration => ({
  metadata: { name, uid: name, creationTimestamp: created, annotations: { node } },
  spec: { vmiName: name },
  status: { phase: phase as never },
});
const limits = { perCluster: 5, outboundPerNode: 2 };
const sourceNodeOf = (x: VirtualMachineInstanceMigration) => x.metadata.annotations?.node;
const refusal = (self: VirtualMachineInstanceMigration, others: VirtualMachineInstanceMigration[]) =>
  slotRefusal({ migration: self, sourceNode: sourceNodeOf(self), all: [self, ...others], sourceNodeOf, limits });

t.test('5 migrations in flight per cluster, 2 out of one node; the older pending one goes first', async (t) => {
  const self = m('self', 'Pending', 'a');
  const running = (n: number, node: string) => Array.from({ length: n }, (_, i) => m(`${node}${i}`, 'Running', node));
  t.equal(refusal(self, []), undefined, 'alone');
  t.equal(refusal(self, [...running(1, 'a'), ...running(3, 'b')]), undefined, '4 in flight, 1 from this node');
  t.match(refusal(self, [...running(2, 'b'), ...running(3, 'c')]), /5 migrations .* cluster \(at most 5\)/, 'cluster full');
  t.match(refusal(self, running(2, 'a')), /out of node a \(at most 2\)/, 'node full');
  t.equal(
    refusal(self, [...running(2, 'a').map((x) => ({ ...x, status: { phase: 'Succeeded' as const } }))]),
    undefined,
    'final ones hold none',
  );
  t.match(
    refusal(self, [...running(1, 'a'), m('older', 'Pending', 'a', '2026-01-01T00:00:01Z')]),
    /out of node a/,
    'an older pending one first',
  );
  t.equal(
    refusal(self, [...running(1, 'a'), m('younger', 'Pending', 'a', '2026-01-01T00:00:20Z')]),
    undefined,
    'a younger one waits behind',
  );
});
