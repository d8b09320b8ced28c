import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { derivePodStatus, type PodStatusInput } from './status.js';

const now = new Date('2026-11-21T00:00:00Z');
const started = new Date('2026-11-20T23:59:00Z');
const pod = (restartPolicy = 'Always'): V1Pod => ({
  metadata: { name: 'p', namespace: 'ns', uid: 'u' },
  spec: { restartPolicy, containers: [{ name: 'vm', image: 'localhost/vkvm/test-guest:v1' }] },
});
const base = (over: Partial<PodStatusInput> = {}): PodStatusInput => ({ pod: pod(), now, hostIP: '192.0.2.2', ...over });
const summary = (i: PodStatusInput) => {
  const s = derivePodStatus(i);
  const c = s.containerStatuses![0]!;
  return {
    phase: s.phase,
    ready: s.conditions!.find((x) => x.type === 'Ready')!.status,
    state: Object.keys(c.state!)[0],
    reason: c.state!.waiting?.reason ?? c.state!.terminated?.reason,
  };
};

t.test('the ordered table', async (t) => {
  const running = { phase: 'Running' as const, startedAt: started, guestReady: true, restartCount: 0, domainUUID: 'd' };
  const cases: Array<[string, PodStatusInput, object]> = [
    ['nothing known yet', base({ preparing: true }), { phase: 'Pending', ready: 'False', state: 'waiting', reason: 'ContainerCreating' }],
    ['running, guest not ready', base({ vm: { ...running, guestReady: false } }), { phase: 'Running', ready: 'False', state: 'running' }],
    ['running and ready', base({ vm: running }), { phase: 'Running', ready: 'True', state: 'running' }],
    [
      'paused is running but not ready',
      base({ vm: { ...running, phase: 'Paused' } }),
      { phase: 'Running', ready: 'False', state: 'running' },
    ],
    [
      'image error',
      base({ imageError: { reason: 'ErrImagePull', message: 'no such file' } }),
      { phase: 'Pending', state: 'waiting', reason: 'ErrImagePull' },
    ],
    [
      'image error, Never (a VMI launcher pod): retried, not final, though its launcher exited',
      base({ pod: pod('Never'), vm: { ...running, phase: 'Failed' }, imageError: { reason: 'ImagePullBackOff', message: 'no such file' } }),
      { phase: 'Pending', state: 'waiting', reason: 'ImagePullBackOff' },
    ],
    [
      'a start that failed, Never (a VMI launcher pod): CreateContainerError, retried, not final',
      base({ pod: pod('Never'), startError: { message: 'no space left on device' } }),
      { phase: 'Pending', state: 'waiting', reason: 'CreateContainerError' },
    ],
    [
      'a launcher exiting during its start is not the end of the pod (Never)',
      base({ pod: pod('Never'), vm: { ...running, phase: 'Failed' }, preparing: true }),
      { phase: 'Pending', reason: 'ContainerCreating' },
    ],
    [
      'invalid spec is terminal',
      base({ invalid: { reason: 'InvalidVMSpec', message: 'm' } }),
      { phase: 'Failed', reason: 'InvalidVMSpec' },
    ],
    [
      'poweroff, Never',
      base({ pod: pod('Never'), vm: { ...running, phase: 'Succeeded' } }),
      { phase: 'Succeeded', state: 'terminated', reason: 'Completed' },
    ],
    [
      'crash, OnFailure restarts',
      base({ pod: pod('OnFailure'), vm: { ...running, phase: 'Failed' } }),
      { phase: 'Pending', state: 'terminated', reason: 'Error' },
    ],
    ['poweroff, OnFailure is final', base({ pod: pod('OnFailure'), vm: { ...running, phase: 'Succeeded' } }), { phase: 'Succeeded' }],
    [
      'backoff after restarts',
      base({ backoff: { message: 'back-off 10s' }, vm: { ...running, phase: 'Succeeded', restartCount: 2 } }),
      { phase: 'Running', state: 'waiting', reason: 'CrashLoopBackOff' },
    ],
  ];
  for (const [name, input, want] of cases) t.match(summary(input), want, name);
});

t.test('container status carries the domain uuid, restart count and last termination', async (t) => {
  const s = derivePodStatus(
    base({
      podIP: '10.244.0.5',
      vm: {
        phase: 'Running',
        startedAt: started,
        guestReady: true,
        restartCount: 1,
        domainUUID: 'abc',
        lastTermination: { reason: 'Completed', exitCode: 0, message: 'the guest powered off', finishedAt: started },
      },
    }),
  );
  t.match(s, {
    podIP: '10.244.0.5',
    hostIP: '192.0.2.2',
    containerStatuses: [
      {
        containerID: 'vkvm://abc',
        restartCount: 1,
        image: 'localhost/vkvm/test-guest:v1',
        lastState: { terminated: { reason: 'Completed', exitCode: 0, message: 'the guest powered off' } },
      },
    ],
  });
  t.same(
    s.conditions!.map((c) => `${c.type}=${c.status}`),
    ['PodScheduled=True', 'Initialized=True', 'ContainersReady=True', 'Ready=True'],
  );
});

t.test('transition times move only when a condition flips', async (t) => {
  const earlier = new Date('2026-01-01T00:00:00Z');
  const p = pod();
  p.status = {
    conditions: [
      { type: 'Ready', status: 'False', lastTransitionTime: earlier },
      { type: 'PodScheduled', status: 'True', lastTransitionTime: earlier },
    ],
  };
  const s = derivePodStatus(base({ pod: p, vm: { phase: 'Running', guestReady: true, restartCount: 0 } }));
  t.same(s.conditions!.find((c) => c.type === 'PodScheduled')!.lastTransitionTime, earlier);
  t.same(s.conditions!.find((c) => c.type === 'Ready')!.lastTransitionTime, now);
});

t.test('live migration: a target waits Running once prepared, never Ready; a source that migrated ends Succeeded, Migrated', async (t) => {
  const waiting = { phase: 'Pending' as const, guestReady: false, restartCount: 0 };
  const migrated = {
    phase: 'Succeeded' as const,
    reason: 'Migrated',
    startedAt: started,
    finishedAt: now,
    guestReady: false,
    restartCount: 0,
  };
  const never = { ...base(), pod: pod('Never') };
  const report = { type: 'vkvm.io/MigrationTarget', reason: 'Ready', message: 'm-1: the target is ready' };
  const of = (i: PodStatusInput) => {
    const s = derivePodStatus(i);
    return { ...summary(i), podReason: s.reason, migration: s.conditions!.find((c) => c.type.startsWith('vkvm.io/'))?.reason };
  };
  t.same(
    [
      of({ ...never, incoming: { prepared: false }, vm: waiting }),
      of({ ...never, incoming: { prepared: true }, vm: waiting, migration: report }),
      of({ ...never, vm: migrated, migration: { ...report, type: 'vkvm.io/MigrationSource', reason: 'Migrated' } }),
    ],
    [
      { phase: 'Pending', ready: 'False', state: 'waiting', reason: 'ContainerCreating', podReason: undefined, migration: undefined },
      { phase: 'Running', ready: 'False', state: 'running', reason: undefined, podReason: undefined, migration: 'Ready' },
      { phase: 'Succeeded', ready: 'False', state: 'terminated', reason: 'Completed', podReason: 'Migrated', migration: 'Migrated' },
    ],
  );
  const first = derivePodStatus({ ...never, incoming: { prepared: true }, migration: report });
  const later = new Date(now.getTime() + 5000);
  const same = derivePodStatus({
    ...never,
    pod: { ...never.pod, status: first },
    now: later,
    incoming: { prepared: true },
    migration: report,
  });
  const moved = derivePodStatus({
    ...never,
    pod: { ...never.pod, status: first },
    now: later,
    migration: { ...report, reason: 'Running', message: 'm-1: resumed' },
  });
  const at = (s: typeof first) => new Date(s.conditions!.find((c) => c.type === report.type)!.lastTransitionTime!).getTime();
  t.same([at(same), at(moved)], [now.getTime(), later.getTime()], "the report's time moves only when it changes");
});
