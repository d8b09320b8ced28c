import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { podControllerEnv, vmPod, type PodControllerEnv } from '../../test/helpers/pod-controller.js';

const Mi = 2 ** 20;

function sized(name: string, memory: string | undefined, creationTimestamp?: string): V1Pod {
  const pod = vmPod(name);
  if (memory) pod.spec!.containers[0]!.resources = { requests: { memory }, limits: { memory } };
  else delete pod.spec!.containers[0]!.resources;
  if (creationTimestamp) pod.metadata!.creationTimestamp = new Date(creationTimestamp);
  return pod;
}

function summary(env: PodControllerEnv, name: string) {
  const pod = env.pods.get(`ns/${name}`);
  return {
    phase: pod?.status?.phase,
    reason: pod?.status?.reason,
    message: pod?.status?.message,
    starts: env.launchers.starts.get(`uid-${name}`),
  };
}

const refused = (requested: number, used: number) => ({
  phase: 'Failed',
  reason: 'OutOfmemory',
  message: `Pod was rejected: Node didn't have enough resource: memory, requested: ${requested}, used: ${used}, capacity: ${1024 * Mi}`,
  starts: undefined,
});

t.test(
  "a pod bound past the scheduler that the node's allocatable cannot hold fails OutOfmemory with nothing made; admitted pods are never refused again",
  async (t) => {
    let allocatable: Record<string, string> = { cpu: '2', memory: '1Gi', pods: '110' };
    const env = await podControllerEnv(t, undefined, undefined, undefined, { nodeAllocatable: () => allocatable });
    env.pods.put(sized('first', '600Mi'));
    await env.settle();
    env.pods.put(sized('second', '600Mi'));
    env.pods.put(sized('no-requests', undefined));
    await env.settle();
    // The node shrinks (memory reserved), and the first VM crashes: it was admitted, so it restarts.
    allocatable = { ...allocatable, memory: '100Mi' };
    env.launchers.crash('uid-first');
    await env.settle();
    await env.advance(10_000);
    const whileFull = { first: summary(env, 'first'), second: summary(env, 'second'), noRequests: summary(env, 'no-requests').phase };
    // The first pod goes: a new one fits in its share, while the refused one stays Failed.
    allocatable = { ...allocatable, memory: '1Gi' };
    env.pods.update('ns/first', (p) => ({
      ...p,
      metadata: { ...p.metadata, deletionTimestamp: new Date(), deletionGracePeriodSeconds: 0 },
    }));
    await env.settle();
    env.pods.put(sized('third', '600Mi'));
    await env.settle();
    t.same(
      { whileFull, after: { second: summary(env, 'second'), third: summary(env, 'third').phase } },
      {
        whileFull: {
          first: { phase: 'Running', reason: undefined, message: undefined, starts: 2 },
          second: refused(600 * Mi, 600 * Mi),
          noRequests: 'Running',
        },
        after: { second: refused(600 * Mi, 600 * Mi), third: 'Running' },
      },
      'the refused pod gets no VM and stays Failed; a pod without requests asks for nothing; the admitted pod restarts',
    );
    t.match(
      env.events.filter((e) => e.reason.startsWith('OutOf')),
      [{ object: 'Pod/second', type: 'Warning', reason: 'OutOfmemory', message: /Node didn't have enough resource: memory/ }],
      'an OutOfmemory event on the refused pod only',
    );
  },
);

t.test('after an agent restart the VMs found hold their share, then the other pods are admitted oldest first', async (t) => {
  const env = await podControllerEnv(
    t,
    ({ pods, launchers }) => {
      pods.put(sized('kept', '600Mi', '2026-11-24T10:02:00Z'));
      launchers.leaveRunning('uid-kept');
      // The older one is judged first and takes what is left; the younger does not fit beside it.
      pods.put(sized('aa-younger', '400Mi', '2026-11-24T10:01:00Z'));
      pods.put(sized('zz-older', '400Mi', '2026-11-24T10:00:00Z'));
    },
    undefined,
    undefined,
    { nodeAllocatable: () => ({ cpu: '2', memory: '1Gi', pods: '110' }) },
  );
  t.same(
    { kept: summary(env, 'kept'), older: summary(env, 'zz-older').phase, younger: summary(env, 'aa-younger') },
    {
      kept: { phase: 'Running', reason: undefined, message: undefined, starts: undefined },
      older: 'Running',
      younger: refused(400 * Mi, 1000 * Mi),
    },
    'the running VM is kept, never refused, and the pods waiting are judged by creation time',
  );
});
