import t from 'tap';
import type { V1PodStatus } from '@kubernetes/client-node';
import { sameStatus } from './status-diff.js';

const derived: V1PodStatus = {
  phase: 'Running',
  hostIP: '10.0.0.1',
  startTime: new Date('2026-01-01T00:00:00.123Z'),
  conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: new Date('2026-01-01T00:00:01.900Z') }],
};

t.test('equal when the API holds the same status at one-second precision, other fields and key order aside', async (t) => {
  const stored = {
    qosClass: 'Burstable',
    conditions: [{ lastTransitionTime: new Date('2026-01-01T00:00:01Z'), status: 'True', type: 'Ready' }],
    startTime: new Date('2026-01-01T00:00:00Z'),
    hostIP: '10.0.0.1',
    phase: 'Running',
  } as V1PodStatus;
  t.ok(sameStatus(stored, derived));
});

t.test('different when an owned field changed', async (t) => {
  t.notOk(sameStatus({ ...derived, phase: 'Pending' }, derived), 'phase');
  t.notOk(sameStatus({ ...derived, conditions: [{ type: 'Ready', status: 'False' }] }, derived), 'a condition');
  t.notOk(sameStatus(undefined, derived), 'no status yet');
});
