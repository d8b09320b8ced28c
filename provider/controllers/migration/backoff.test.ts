import t from 'tap';
import type { VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { evacuationBackoffMs } from './backoff.js';

const at = (s: number) => new Date(Date.UTC(2026, 10, 27, 12, 0, s)).toISOString();
const vmim = (name: string, createdS: number, phase?: 'Failed' | 'Succeeded', o: { evacuation?: boolean; deleting?: boolean } = {}) =>
  ({
    metadata: {
      name,
      uid: name,
      namespace: 'ns',
      creationTimestamp: at(createdS),
      ...(o.evacuation === false ? {} : { annotations: { 'kubevirt.io/evacuationMigration': 'a' } }),
      ...(o.deleting ? { deletionTimestamp: at(createdS + 1) } : {}),
    },
    spec: { vmiName: 'vm' },
    status: {
      ...(phase ? { phase } : { phase: 'Pending' }),
      phaseTransitionTimestamps: phase ? [{ phase, phaseTransitionTimestamp: at(createdS + 5) }] : [],
    },
  }) as VirtualMachineInstanceMigration;

t.test('evacuations of a VMI back off 20 s after a failure, doubling per failure since the last success', async (t) => {
  const now = new Date(at(30));
  const newest = vmim('n', 29);
  const cases: Array<[string, number, number]> = [
    ['the first evacuation goes at once', evacuationBackoffMs(newest, [newest], now), 0],
    ['one failure (at 10 s): 20 s from it', evacuationBackoffMs(newest, [vmim('f1', 5, 'Failed'), newest], now), 0],
    ['one failure (at 25 s): 15 s left', evacuationBackoffMs(newest, [vmim('f1', 20, 'Failed'), newest], now), 15_000],
    [
      'two failures: 40 s from the latest',
      evacuationBackoffMs(newest, [vmim('f0', 0, 'Failed'), vmim('f1', 20, 'Failed'), newest], now),
      35_000,
    ],
    [
      'a success resets it',
      evacuationBackoffMs(newest, [vmim('f0', 0, 'Failed'), vmim('s', 10, 'Succeeded'), vmim('f1', 20, 'Failed'), newest], now),
      15_000,
    ],
    [
      'a canceled (deleted) one does not count',
      evacuationBackoffMs(newest, [vmim('f1', 20, 'Failed', { deleting: true }), newest], now),
      0,
    ],
    [
      'a user migration never waits',
      evacuationBackoffMs(vmim('u', 29, undefined, { evacuation: false }), [vmim('f1', 20, 'Failed')], now),
      0,
    ],
    ['only the newest evacuation is held', evacuationBackoffMs(vmim('f1', 20, 'Failed'), [vmim('f1', 20, 'Failed'), newest], now), 0],
  ];
  for (const [name, got, want] of cases) t.equal(got, want, name);
});
