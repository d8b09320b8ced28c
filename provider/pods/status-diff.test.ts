import t from 'tap';
import type { V1PodStatus } from '@kubernetes/client-node';
import { podStatusPatch, sameStatus } from './status-diff.js';

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

t.test('conditions other controllers set are theirs: neither compared nor overwritten', async (t) => {
  const stored = {
    ...derived,
    conditions: [{ type: 'DisruptionTarget', status: 'True', reason: 'DeletionByTaintManager' }, ...derived.conditions!],
  } as V1PodStatus;
  t.ok(sameStatus(stored, derived), 'a foreign condition is no difference');
  t.notOk(sameStatus({ ...stored, conditions: [{ type: 'Ready', status: 'False' }] }, derived), 'an owned one still is');
});

t.test('the status patch merges conditions by type, and nulls what they dropped', async (t) => {
  const patch = podStatusPatch('uid-1', {
    phase: 'Running',
    conditions: [{ type: 'Ready', status: 'True' }],
    containerStatuses: [{ name: 'vm', ready: true, restartCount: 0, image: 'i', imageID: '', state: { running: {} } }],
  });
  t.same(patch, {
    metadata: { uid: 'uid-1' },
    status: {
      phase: 'Running',
      reason: null,
      message: null,
      conditions: [{ type: 'Ready', status: 'True', reason: null, message: null, lastProbeTime: null }],
      containerStatuses: [{ name: 'vm', ready: true, restartCount: 0, image: 'i', imageID: '', state: { running: {} } }],
    },
  });
});
