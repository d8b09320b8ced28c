import t from 'tap';
import { migrationTargetHold, speaksForVmi } from './migration-target.js';
import { podControllerEnv, vmPod } from '../../test/helpers/pod-controller.js';

const pod = (labels: Record<string, string>, nodeName = 'b') => ({ metadata: { labels }, spec: { nodeName, containers: [] } });
const vmi = (nodeName: string) => ({ metadata: { name: 'vm' }, spec: { domain: {} }, status: { nodeName } });

t.test('a node that does not receive migrations holds a migration target pod; any other pod is not held', async (t) => {
  t.match(migrationTargetHold(pod({ 'kubevirt.io/migrationJobUID': 'm-1' })), /target of live migration m-1.*holds the pod Pending/);
  t.equal(migrationTargetHold(pod({ 'kubevirt.io': 'virt-launcher' })), undefined);
});

t.test("a migration target's node writes the VMI status only once the VMI runs on that node; a source not once its VM left", async (t) => {
  const target = pod({ 'kubevirt.io/migrationJobUID': 'm-1' }, 'b');
  const source = pod({}, 'a');
  t.same(
    [
      speaksForVmi(target, vmi('a')),
      speaksForVmi(target, vmi('b')),
      speaksForVmi(source, vmi('a')),
      speaksForVmi(source, vmi('a'), { phase: 'Running', reason: 'Booted' }),
      speaksForVmi(source, vmi('a'), { phase: 'Succeeded', reason: 'Migrated' }),
    ],
    [false, true, true, true, false],
  );
});

t.test(
  'a node without the migration sides never starts a migration target pod: it stays Pending, nothing is made, and an Event says why',
  async (t) => {
    const env = await podControllerEnv(t);
    const target = vmPod('virt-launcher-vm-tgt');
    target.metadata!.labels = { 'kubevirt.io/migrationJobUID': 'm-1' };
    env.pods.put(target);
    env.pods.put(vmPod('ordinary'));
    await env.settle();
    t.same(
      {
        phase: env.pods.get('ns/virt-launcher-vm-tgt')?.status?.phase ?? 'Pending',
        starts: env.launchers.starts.get('uid-virt-launcher-vm-tgt'),
        ordinaryStarts: env.launchers.starts.get('uid-ordinary'),
        // Repeats are one Event with a count in the API (kube/events.ts aggregates).
        events: [...new Set(env.events.filter((e) => e.reason === 'MigrationTargetHeld').map((e) => e.object))],
      },
      { phase: 'Pending', starts: undefined, ordinaryStarts: 1, events: ['Pod/virt-launcher-vm-tgt'] },
    );
  },
);
