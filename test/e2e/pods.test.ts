// Pods scheduled to the vkvm node become VMs on the real control plane (real
// launcher, libvirt, QEMU, test guest); status flows back; kubectl logs / exec
// / attach reach the guest through kube-apiserver; deletion and agent restarts
// leave nothing behind and restart nothing.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import { strategicMerge } from '../../provider/kube/client.js';
import {
  agentLogLines,
  condition,
  isRunningAndReady,
  poll,
  qemuPidsOf,
  restartAgent,
  startAgent,
  startTestCluster,
  TEST_GUEST_IMAGE,
  testGuestPod,
  testNamespace,
  waitFor,
  waitForAll,
  waitForGone,
  type AgentProcess,
  type TestGuestPodOptions,
  type TestNamespace,
} from './framework/index.js';

const NODE = 'vkvm-e2e-pods';
// As the node operator: pods may name boot images under /nonexistent (the missing-image case).
const AGENT_ARGS = ['--host-image-dir=/nonexistent'];
const BOOT_DEADLINE_MS = 180_000;

const guestPod = (name: string, o: Partial<TestGuestPodOptions> = {}): V1Pod =>
  testGuestPod({ name, node: NODE, terminationGracePeriodSeconds: 60, ...o });

/** `kubectl logs -f` as a child process, with its output so far. */
function followLogs(t: Test, ns: TestNamespace, pod: string): { output(): string } {
  let output = '';
  const { cluster } = ns;
  const child = spawn(cluster.binary, ['kubectl', `--kubeconfig=${cluster.kubeconfigPath}`, '-n', ns.name, 'logs', '-f', pod], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  return { output: () => output };
}

/** A line of its own in console output (the typed command echoes with its prompt). */
const lineOf = (s: string): RegExp => new RegExp(`^${s}\\r?$`, 'm');

t.test('pods become VMs on the real control plane', async (t) => {
  // Agents belong to this test, not to the subtest that restarts one: a subtest's teardown would stop it.
  const root = t;
  const cluster = await startTestCluster(t);
  let agent: AgentProcess = await startAgent(t, cluster, { nodeName: NODE, extraArgs: AGENT_ARGS });
  const ns = await testNamespace(t, cluster, 'e2e-pods');
  const kubectl = ns.kubectl;
  const runningAndReady = (name: string) =>
    waitFor(ns.pod(name), isRunningAndReady, { what: 'Running and Ready', deadlineMs: BOOT_DEADLINE_MS });
  const eventsOf = async (uid: string) =>
    (await cluster.clients.core.listNamespacedEvent({ namespace: ns.name, fieldSelector: `involvedObject.uid=${uid}` })).items;
  const guestAgentAnswers = (name: string) =>
    poll(
      `guest agent of ${name} answers`,
      () => kubectl(['exec', name, '--', '/bin/true']),
      (r) => r.code === 0,
      { deadlineMs: 90_000, intervalMs: 2000 },
    );

  // vm1 serves the read-only subtests below (logs, exec, attach, stats), then the deletion test.
  await t.test(
    'a pod with nodeSelector and toleration is scheduled and becomes a Running VM; kubectl logs shows the boot marker',
    async (t) => {
      const t0 = Date.now();
      await ns.createPod(guestPod('vm1'));
      const pod = await runningAndReady('vm1');
      t.comment(`created → Running and Ready in ${Date.now() - t0} ms`);
      const uid = pod.metadata!.uid!;
      t.match(
        { nodeName: pod.spec?.nodeName, status: pod.status },
        {
          nodeName: NODE,
          status: {
            phase: 'Running',
            hostIP: /^\d+\.\d+\.\d+\.\d+$/,
            conditions: [
              { type: 'PodScheduled', status: 'True' },
              { type: 'Initialized', status: 'True' },
              { type: 'ContainersReady', status: 'True' },
              { type: 'Ready', status: 'True' },
            ],
            containerStatuses: [
              {
                name: 'vm',
                ready: true,
                restartCount: 0,
                image: TEST_GUEST_IMAGE,
                containerID: `vkvm://${uid}`,
                state: { running: { startedAt: Date } },
              },
            ],
          },
        },
        'status written back: phase, conditions, container status with the domain uuid',
      );
      const qemu = qemuPidsOf(uid);
      t.equal(qemu.length, 1, 'one QEMU runs for the pod');
      const logs = await poll(
        'boot marker in kubectl logs',
        () => kubectl(['logs', 'vm1']),
        (r) => r.stdout.includes(GUEST_BOOT_MARKER),
        { deadlineMs: 60_000 },
      );
      t.equal(logs.code, 0, 'kubectl logs succeeds');
      const started = await waitFor(ns.eventsOf(uid), (e) => e.reason === 'Started', { what: 'the Started event' });
      t.match(
        started,
        { type: 'Normal', message: `Started VM (QEMU pid ${qemu[0]}) in` },
        'the Started event names the QEMU process that runs',
      );
      const events = await eventsOf(uid);
      const byReason = Object.fromEntries(events.map((e) => [e.reason, e.message]));
      t.match(
        { pulling: byReason.Pulling, pulled: byReason.Pulled, created: byReason.Created, started: byReason.Started },
        {
          pulling: undefined,
          pulled: `Container image "${TEST_GUEST_IMAGE}" already present on machine`,
          created: /^Created VM /,
          started: /^Started VM /,
        },
        "events recorded; the test guest came from the node's store, no registry was asked (no Pulling)",
      );
    },
  );

  await t.test('kubectl exec -i and attach type into the serial console; kubectl logs -f streams it', async (t) => {
    const follow = followLogs(t, ns, 'vm1');
    const token = `hello-${Math.floor(Math.random() * 1e9)}`;
    const exec = await kubectl(['exec', '-i', 'vm1', '--', 'sh'], { input: `echo ${token}\n`, timeoutMs: 60_000 });
    t.match({ code: exec.code, stdout: exec.stdout }, { code: 0, stdout: lineOf(token) }, 'exec -i returns the echoed line');
    const attachToken = `attach-${Math.floor(Math.random() * 1e9)}`;
    const attach = await kubectl(['attach', '-i', 'vm1'], { input: `echo ${attachToken}\n`, timeoutMs: 60_000 });
    t.match({ code: attach.code, stdout: attach.stdout }, { code: 0, stdout: lineOf(attachToken) }, 'attach -i returns the echoed line');
    const streamed = await poll(
      'logs -f shows both lines',
      async () => follow.output(),
      (o) => lineOf(token).test(o) && lineOf(attachToken).test(o),
      {
        deadlineMs: 30_000,
        intervalMs: 200,
      },
    );
    t.match(streamed, lineOf(token), 'kubectl logs -f streamed the exec output, written after it started');
    t.match(streamed, lineOf(attachToken), 'and the attach output');
  });

  await t.test('kubectl exec without stdin runs the command through the guest agent', async (t) => {
    const ok = await poll(
      'guest agent answers',
      () => kubectl(['exec', 'vm1', '--', '/bin/echo', 'via-agent']),
      (r) => r.code === 0,
      { deadlineMs: 90_000, intervalMs: 2000 },
    );
    t.equal(ok.stdout, 'via-agent\n', 'stdout of the guest command');
    const failed = await kubectl(['exec', 'vm1', '--', '/bin/sh', '-c', 'echo to-stderr >&2; exit 3']);
    t.match(failed, { code: 3, stderr: /to-stderr[\s\S]*command terminated with exit code 3/ }, 'stderr and the exit code come back');
  });

  await t.test('the agent is killed and restarted while 3 VMs run: none restarts, statuses stay correct', async (t) => {
    const names = ['vm1', 'vm2', 'vm3'];
    await ns.createPod(guestPod('vm2'));
    await ns.createPod(guestPod('vm3'));
    const pods = await Promise.all(names.map(runningAndReady));
    const before = pods.map((p) => ({ name: p.metadata!.name, pids: qemuPidsOf(p.metadata!.uid!) }));
    t.ok(
      before.every((b) => b.pids.length === 1),
      'each VM has its QEMU',
    );
    await agent.kill('SIGKILL');
    agent = await restartAgent(root, cluster, agent);
    t.ok(
      agent.output.some((l) => l.includes('pod controller started') && l.includes('"reattached":3')),
      'the new agent re-attached to 3 launchers',
    );
    // Every pod as the new agent's queues leave it: checked on each change until all three are Running and Ready.
    const all = await waitForAll(ns.pods(), (ps) => names.every((n) => ps.some((p) => p.metadata?.name === n && isRunningAndReady(p))), {
      what: `${names.join(', ')} Running and Ready under the new agent`,
    });
    const after = names.map((n) => all.find((p) => p.metadata?.name === n)!);
    t.same(
      after.map((p) => ({ name: p.metadata!.name, pids: qemuPidsOf(p.metadata!.uid!) })),
      before,
      'the same QEMU processes run',
    );
    t.same(
      after.map((p) => p.status?.containerStatuses?.[0]?.restartCount),
      [0, 0, 0],
      'no restarts counted',
    );
    const started = (await Promise.all(after.map((p) => eventsOf(p.metadata!.uid!)))).map((es) =>
      es.filter((e) => e.reason === 'Started').reduce((n, e) => n + (e.count ?? 1), 0),
    );
    t.same(started, [1, 1, 1], 'each VM was started exactly once');
  });

  await t.test('a guest that powers off is restarted with back-off (Always) or left Succeeded (Never)', async (t) => {
    // Pods of its own: the restart and the power-off change them, and the subtests after this one count the others.
    t.teardown(async () => {
      // Graceful (1 s): the pod object goes only once its VM did.
      for (const name of ['always', 'once'])
        await cluster.clients.core.deleteNamespacedPod({ name, namespace: ns.name, gracePeriodSeconds: 1 }).catch(() => undefined);
      await waitForGone(ns.pods({ labelSelector: 'e2e=power-off' }), { deadlineMs: 120_000 });
    });
    const labelled = (pod: V1Pod): V1Pod => ({ ...pod, metadata: { ...pod.metadata, labels: { e2e: 'power-off' } } });
    await ns.createPod(labelled(guestPod('always')));
    await ns.createPod(labelled(guestPod('once', { restartPolicy: 'Never' })));
    const [always] = await Promise.all([runningAndReady('always'), runningAndReady('once')]);
    const uid = always.metadata!.uid!;
    const firstPids = qemuPidsOf(uid);
    // A condition another controller owns (as a readiness gate's would be): the agent's status writes must keep it.
    const foreign = { type: 'example.com/Maintenance', status: 'True', reason: 'Scheduled' };
    await cluster.clients.core.patchNamespacedPodStatus(
      { name: 'always', namespace: ns.name, body: { status: { conditions: [foreign] } } },
      strategicMerge,
    );
    for (const name of ['always', 'once']) {
      await guestAgentAnswers(name);
      // The agent's reply may not make it out before the guest is gone: only the outcome counts.
      await kubectl(['exec', name, '--', '/bin/poweroff']);
    }
    const done = await waitFor(ns.pod('once'), (p) => p.status?.phase === 'Succeeded', { what: 'Succeeded' });
    t.match(
      done.status?.containerStatuses?.[0],
      { ready: false, state: { terminated: { exitCode: 0, reason: 'Completed', finishedAt: Date } } },
      'restartPolicy Never: the pod is Succeeded with the VM terminated/Completed',
    );
    const backoff = await waitFor(
      ns.pod('always'),
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'CrashLoopBackOff',
      {
        what: 'in CrashLoopBackOff',
        deadlineMs: 30_000,
      },
    );
    t.match(
      backoff.status?.containerStatuses?.[0],
      { ready: false, lastState: { terminated: { reason: 'Completed' } } },
      'waiting in CrashLoopBackOff with the last run terminated',
    );
    const restarted = await waitFor(
      ns.pod('always'),
      (p) => p.status?.containerStatuses?.[0]?.restartCount === 1 && condition(p, 'Ready') === 'True',
      {
        what: 'restarted once and Ready',
        deadlineMs: BOOT_DEADLINE_MS,
      },
    );
    t.equal(restarted.status?.phase, 'Running', 'Running again after the back-off');
    t.same(
      Object.keys(restarted.status?.containerStatuses?.[0]?.state ?? {}),
      ['running'],
      'the container state is running only: nothing of the waiting state is merged in',
    );
    t.notOk(restarted.status?.conditions?.find((c) => c.type === 'Ready')?.reason, 'Ready True carries no stale reason from the back-off');
    t.match(
      restarted.status?.conditions?.find((c) => c.type === foreign.type),
      foreign,
      "another controller's condition survived the agent's status writes",
    );
    t.notSame(qemuPidsOf(uid), firstPids, 'a new QEMU process');
    const previous = await kubectl(['logs', 'always', '--previous']);
    t.match(previous, { code: 0, stdout: new RegExp(GUEST_BOOT_MARKER) }, 'kubectl logs --previous shows the run before the restart');
    const backOff = await waitFor(ns.eventsOf(uid), (e) => e.reason === 'BackOff', { what: 'the BackOff event' });
    t.match(
      backOff,
      { type: 'Warning', message: /^Back-off \d+s restarting stopped VM \(GuestShutdown\)$/ },
      'a BackOff event names why the VM stopped',
    );
  });

  await t.test('the kubelet stats and metrics endpoints report the running VMs', async (t) => {
    const summary = await poll(
      'stats summary with 3 pods',
      async () =>
        JSON.parse((await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/stats/summary`])).stdout) as {
          node: { nodeName: string; memory: { workingSetBytes: number } };
          pods: { podRef: { name: string }; memory: { workingSetBytes: number }; cpu: { usageCoreNanoSeconds: number } }[];
        },
      (s) => s.pods?.length === 3,
    );
    t.match(summary.node, { nodeName: NODE, memory: { workingSetBytes: Number } }, 'node figures');
    t.same(summary.pods.map((p) => p.podRef.name).sort(), ['vm1', 'vm2', 'vm3'], 'one entry per running VM');
    t.ok(
      summary.pods.every((p) => p.memory.workingSetBytes > 64 * 1024 * 1024 && p.cpu.usageCoreNanoSeconds > 0),
      'each VM has its memory (guest RAM included) and CPU time',
    );
    const resource = await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/metrics/resource`]);
    t.match(resource.stdout, /^pod_memory_working_set_bytes\{namespace="e2e-pods",pod="vm1"\} \d+/m, 'metrics/resource for metrics-server');
    const metrics = await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/metrics`]);
    t.match(metrics.stdout, /^vkvm_vm_uptime_seconds\{namespace="e2e-pods",pod="vm1",uid="[^"]+"\} \d/m, 'Prometheus per-VM metrics');
    t.match(metrics.stdout, /^vkvm_vms_running 3$/m, 'agent metric: VMs running');
  });

  await t.test('kubectl delete pod shuts the guest down within the grace period and leaves nothing behind', async (t) => {
    const pod = await ns.readPod('vm1');
    const uid = pod.metadata!.uid!;
    const vmDir = join(agent.stateDir, 'vms', uid);
    const launcher = JSON.parse(readFileSync(join(vmDir, 'launcher.json'), 'utf8')) as { pid: number };
    const t0 = Date.now();
    const del = await kubectl(['delete', 'pod', 'vm1', '--wait=true', '--timeout=120s'], { timeoutMs: 150_000 });
    t.equal(del.code, 0, `kubectl delete returned after ${Date.now() - t0} ms`);
    // The launcher's last word: the guest powered off on ACPI (GracePeriodExpired, had it been destroyed at the end of the 60 s).
    const [gone] = await poll(
      'the agent logged the launcher gone',
      async () => agentLogLines(agent, 'launcher gone').filter((l) => l.vm === uid),
      (ls) => ls.length > 0,
      {
        deadlineMs: 10_000,
        intervalMs: 100,
      },
    );
    t.match(
      gone,
      { reason: 'LauncherExited', message: 'launcher exited; VM Succeeded (GuestShutdown)' },
      'the guest powered off within the 60 s grace period (ACPI)',
    );
    t.same(qemuPidsOf(uid), [], 'no QEMU');
    t.notOk(
      existsSync(`/proc/${launcher.pid}`) && !readFileSync(`/proc/${launcher.pid}/stat`, 'utf8').includes(') Z'),
      'the launcher exited',
    );
    t.notOk(existsSync(`/sys/fs/cgroup/memory/vkvm/${uid}`) || existsSync(`/sys/fs/cgroup/vkvm/${uid}`), 'the cgroup is removed');
    t.notOk(existsSync(vmDir), 'the VM directory (overlays, console log) is removed');
    const reasons = (await eventsOf(uid)).map((e) => e.reason);
    t.ok(reasons.includes('Killing'), 'a Killing event was recorded');
  });

  await t.test('a force delete during a long grace period kills the VM at once', async (t) => {
    const pod = await ns.readPod('vm2');
    const uid = pod.metadata!.uid!;
    await guestAgentAnswers('vm2');
    // Without its handler, acpid ignores the power button: the guest would take the whole grace period.
    t.match(await kubectl(['exec', 'vm2', '--', '/bin/rm', '/etc/acpi/PWRF/00000080']), { code: 0 }, 'the guest ignores ACPI now');
    await cluster.clients.core.deleteNamespacedPod({ name: 'vm2', namespace: ns.name, body: { gracePeriodSeconds: 600 } });
    const killing = await waitFor(ns.eventsOf(uid), (e) => e.reason === 'Killing', { what: 'the Killing event' });
    t.match(killing, { type: 'Normal', message: 'Stopping VM (grace period 600s)' }, 'the agent stops the VM with the 600 s grace period');
    await new Promise((r) => setTimeout(r, 3000));
    t.not(qemuPidsOf(uid).length, 0, 'the guest still runs, inside its 600 s grace period');
    await cluster.clients.core.deleteNamespacedPod({ name: 'vm2', namespace: ns.name, body: { gracePeriodSeconds: 0 } });
    const left = await poll(
      'QEMU of vm2 gone',
      async () => qemuPidsOf(uid),
      (p) => p.length === 0,
      { deadlineMs: 120_000, intervalMs: 500 },
    ).catch(() => qemuPidsOf(uid));
    t.same(left, [], 'the force delete killed the VM without waiting out the grace period');
    // How it went, for the record: the launcher's last word, and whether the agent had to SIGKILL it.
    for (const msg of ['launcher gone', 'launcher did not stop cleanly; killing it']) {
      for (const l of agentLogLines(agent, msg).filter((l) => l.vm === uid)) {
        t.comment(`agent at ${String(l.time)}: ${msg}: ${String(l.message ?? (l.err as { message?: string } | undefined)?.message ?? '')}`);
      }
    }
    const vmDir = join(agent.stateDir, 'vms', uid);
    await poll(
      'VM directory removed',
      async () => existsSync(vmDir),
      (e) => !e,
      { deadlineMs: 30_000, intervalMs: 200 },
    ).catch(() => undefined);
    t.notOk(existsSync(vmDir), 'the VM directory is removed');
  });

  await t.test('a pod whose image does not exist gets ErrImagePull and an event, and nothing is left behind', async (t) => {
    await ns.createPod(guestPod('noimage', { image: '/nonexistent/vkvm-e2e.qcow2' }));
    const pod = await waitFor(
      ns.pod('noimage'),
      (p) => ['ErrImagePull', 'ImagePullBackOff'].includes(p.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? ''),
      {
        what: 'an image error in its status',
      },
    );
    const uid = pod.metadata!.uid!;
    t.match(
      pod.status,
      {
        phase: 'Pending',
        containerStatuses: [{ ready: false, state: { waiting: { message: /nonexistent\/vkvm-e2e\.qcow2 does not exist/ } } }],
      },
      'Pending with a message naming the missing image',
    );
    const failed = await waitFor(ns.eventsOf(uid), (e) => e.reason === 'Failed', { what: 'a Failed event' });
    t.match(
      failed,
      {
        type: 'Warning',
        involvedObject: { kind: 'Pod', name: 'noimage' },
        message:
          /^Failed to prepare boot image "\/nonexistent\/vkvm-e2e\.qcow2": .*spec\.containers\[0\]\.image: \/nonexistent\/vkvm-e2e\.qcow2 does not exist/,
      },
      'a Warning Failed event on the pod names the image and the field',
    );
    t.same(qemuPidsOf(uid), [], 'no QEMU');
    t.notOk(existsSync(join(agent.stateDir, 'vms', uid)), 'no VM directory');
    t.notOk(existsSync(`/sys/fs/cgroup/memory/vkvm/${uid}`), 'no cgroup');
  });

  await t.test('a pod vkvm cannot realize fails with a condition naming the field', async (t) => {
    await ns.createPod(guestPod('toosmall', { resources: { limits: { memory: '16Mi' } } }));
    const pod = await waitFor(ns.pod('toosmall'), (p) => p.status?.phase === 'Failed', { what: 'Failed' });
    // Guest memory is the request, which the API server defaulted to the limit: that is the field named.
    t.match(
      pod.status,
      { phase: 'Failed', reason: 'InvalidVMSpec', message: /spec\.containers\[0\]\.resources\.requests\.memory: 16Mi is below/ },
      'the message names the field',
    );
    t.same(qemuPidsOf(pod.metadata!.uid!), [], 'nothing was started');
  });
});
