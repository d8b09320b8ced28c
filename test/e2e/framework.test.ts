// The e2e framework's waits on the real control plane (no node: pods stay
// Pending): a wait resolves with the object as a typed read returns it, sees
// objects made after it started and deletions, and on its deadline fails
// naming what it waited for and the last state it saw.
import t from 'tap';
import { condition, startTestCluster, testGuestPod, testNamespace, waitFor, waitForAll, waitForGone } from './framework/index.js';

t.test('watch-based waits', async (t) => {
  const cluster = await startTestCluster(t);
  const ns = await testNamespace(t, cluster, 'e2e-framework');

  await t.test('the namespace is ready for pods: its default ServiceAccount exists', async (t) => {
    const account = await cluster.clients.core.readNamespacedServiceAccount({ name: 'default', namespace: ns.name });
    t.equal(account.metadata?.name, 'default');
  });

  await t.test('a wait started before its object exists resolves with it, typed as a read returns it', async (t) => {
    const unschedulable = waitFor(ns.pod('p1'), (p) => condition(p, 'PodScheduled') === 'False', { what: 'Unschedulable' });
    await ns.createPod(testGuestPod({ name: 'p1' }));
    const pod = await unschedulable;
    t.match(
      pod,
      {
        metadata: { name: 'p1', namespace: ns.name, creationTimestamp: Date },
        status: {
          phase: 'Pending',
          conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', lastTransitionTime: Date }],
        },
      },
      'the pod as the scheduler left it, its timestamps Dates',
    );
  });

  await t.test('a wait that times out names the watch, what it waited for, and the last state seen', async (t) => {
    await t.rejects(
      waitFor(ns.pod('p1'), (p) => p.status?.phase === 'Running', { what: 'Running', deadlineMs: 2000 }),
      {
        message:
          /^timed out after 2 s waiting for pods in e2e-framework named p1: Running; last seen: (?=.*"name": "p1")(?=.*"phase": "Pending")(?=.*"reason": "Unschedulable")/s,
      },
    );
    await t.rejects(
      waitFor(ns.pod('nothing'), () => true, { deadlineMs: 1000 }),
      { message: /waiting for pods in e2e-framework named nothing; last seen: no object$/ },
    );
    await t.rejects(
      waitFor(ns.pod('p1'), (p) => p.status!.containerStatuses![0]!.ready, { deadlineMs: 1000 }),
      { message: /last seen: .*"phase": "Pending".*; last error: .*undefined/s },
      'a predicate that throws is unsatisfied, and its error is shown',
    );
  });

  await t.test('waitForAll checks the set together; waitForGone sees deletions', async (t) => {
    const both = waitForAll(ns.pods({ labelSelector: 'set=two' }), (ps) => ps.length === 2, { what: 'two pods' });
    for (const name of ['p2', 'p3']) await ns.createPod({ ...testGuestPod({ name }), metadata: { name, labels: { set: 'two' } } });
    t.same((await both).map((p) => p.metadata?.name).sort(), ['p2', 'p3'], 'both pods of the selector');
    for (const name of ['p1', 'p2', 'p3'])
      await cluster.clients.core.deleteNamespacedPod({ name, namespace: ns.name, gracePeriodSeconds: 0 });
    t.same(await waitForGone(ns.pods()), [], 'no pod left');
  });
});
