import t from 'tap';
import { nextReplicaStatus, pauseEvent, POOL_PAUSED, REPLICASET_PAUSED } from './replica-status.js';

const now = new Date('2026-11-27T10:00:00Z');
const selector = { matchLabels: { 'kubevirt.io/vmpool': 'p' } };

t.test("a replica status as KubeVirt's: counts, the selector string, ReplicaPaused and ReplicaFailure", async (t) => {
  const running = nextReplicaStatus({
    current: undefined,
    selector,
    paused: false,
    pausedWording: POOL_PAUSED,
    replicas: 3,
    readyReplicas: 2,
    now,
  });
  t.same(running, { replicas: 3, readyReplicas: 2, labelSelector: 'kubevirt.io/vmpool=p', conditions: [] });
  const failing = nextReplicaStatus({
    current: running,
    selector,
    paused: true,
    pausedWording: POOL_PAUSED,
    replicas: 3,
    readyReplicas: 3,
    failure: { reason: 'FailedScaleOut', message: 'Error during scale out: exceeded quota' },
    now,
  });
  t.match(failing.conditions, [
    {
      type: 'ReplicaPaused',
      status: 'True',
      reason: 'SuccessfulPaused',
      message: 'Pool controller is paused',
      lastTransitionTime: now.toISOString(),
    },
    { type: 'ReplicaFailure', status: 'True', reason: 'FailedScaleOut', message: 'Error during scale out: exceeded quota' },
  ]);
  const later = new Date(now.getTime() + 5000);
  const resumed = nextReplicaStatus({
    current: failing,
    selector,
    paused: false,
    pausedWording: REPLICASET_PAUSED,
    replicas: 3,
    readyReplicas: 3,
    now: later,
  });
  t.same(resumed.conditions, [], 'both go when their cause does');
  t.same([pauseEvent(running, failing), pauseEvent(failing, resumed), pauseEvent(running, running)], ['paused', 'resumed', undefined]);
  t.match(
    nextReplicaStatus({ current: undefined, selector, paused: true, pausedWording: REPLICASET_PAUSED, replicas: 0, readyReplicas: 0, now })
      .conditions,
    [{ reason: 'Paused', message: 'Controller got paused' }],
    "the replica set's own wording",
  );
});
