// The node's state filesystem full, on the real control plane with real VMs:
// the agent's --state-dir is a small loop-mounted ext4 that the test fills.
// What must hold: the node reports DiskPressure; a new VM is refused as a
// kubelet's admission refuses it (Failed, Evicted) with nothing half-created;
// the VM already running keeps running; once space is back, a new VM starts. Two VMs (guests are TCG-slow here).
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import {
  condition,
  hostTracesOf,
  isRunningAndReady,
  loopFilesystem,
  nodes,
  processesInCgroupOf,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  vmProcess,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-disk';
const NS = 'e2e-disk-full';
const BOOT_DEADLINE_MS = 180_000;
const QEMU = 'qemu-system';
/** The taint the node lifecycle controller puts on a node under DiskPressure; the new pod tolerates it to get there. */
const DISK_PRESSURE_TOLERATION = { key: 'node.kubernetes.io/disk-pressure', operator: 'Exists', effect: 'NoSchedule' };

t.test('the state filesystem full', async (t) => {
  const cluster = await startTestCluster(t);
  const fs = await loopFilesystem(t, 128);
  const agent = await startAgent(t, cluster, { nodeName: NODE, stateDir: fs.dir });
  const ns = await testNamespace(t, cluster, NS);
  const runningPod = (name: string) =>
    waitFor(ns.pod(name), isRunningAndReady, { what: 'Running and Ready', deadlineMs: BOOT_DEADLINE_MS });
  const node = nodes(cluster.clients, { name: NODE });

  await ns.createPod(testGuestPod({ name: 'before', node: NODE }));
  const before = await runningPod('before');
  const beforeUid = before.metadata!.uid!;
  const qemu = await vmProcess(beforeUid, QEMU);

  await fs.fill();
  const pressured = await waitFor(node, (n) => condition(n, 'DiskPressure') === 'True', { what: 'DiskPressure True', deadlineMs: 60_000 });
  t.match(
    pressured.status?.conditions?.find((c) => c.type === 'DiskPressure'),
    { status: 'True', reason: 'KubeletHasDiskPressure', message: /state filesystem/ },
    'the node reports DiskPressure, naming the state filesystem',
  );

  const pod: V1Pod = testGuestPod({ name: 'after', node: NODE });
  pod.spec!.tolerations!.push(DISK_PRESSURE_TOLERATION);
  await ns.createPod(pod);
  // As a kubelet's admission under DiskPressure: the pod fails at once, before anything is made for it.
  const refused = await waitFor(ns.pod('after'), (p) => p.status?.phase === 'Failed', {
    what: 'Failed by the node admission',
    deadlineMs: 90_000,
  });
  const afterUid = refused.metadata!.uid!;
  t.match(
    refused.status,
    { phase: 'Failed', reason: 'Evicted', message: /^Pod was rejected: The node had condition: \[DiskPressure\]/ },
    'the new VM is refused with the reason and message a kubelet gives',
  );
  t.match(
    { processes: await processesInCgroupOf(afterUid), traces: await hostTracesOf(agent, afterUid) },
    { processes: [], traces: { processes: [], cgroups: [], vmDir: false, launcherSocket: false } },
    'nothing of the new VM is half-created: no launcher, libvirtd or QEMU, no cgroup, no VM directory',
  );
  t.match(
    { pod: await ns.readPod('before'), qemu: await vmProcess(beforeUid, QEMU) },
    { pod: { status: { phase: 'Running', containerStatuses: [{ ready: true, restartCount: 0 }] } }, qemu },
    'the VM already running keeps running, on the same QEMU',
  );

  await fs.unfill();
  const relieved = await waitFor(node, (n) => condition(n, 'DiskPressure') === 'False', { what: 'DiskPressure False', deadlineMs: 60_000 });
  t.ok(relieved, 'with space back the pressure is gone');
  await ns.createPod(testGuestPod({ name: 'later', node: NODE }));
  t.match(await runningPod('later'), { status: { phase: 'Running' } }, 'and a new VM starts');
});
