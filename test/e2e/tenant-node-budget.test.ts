// A tenant (a ServiceAccount with `edit` in one namespace) is held to what the
// node can give: slow image URLs hold none of the agent's sync workers, so
// other pods still start and deletions go through; disks count against the
// pod's ephemeral-storage limit; a pod bound past the scheduler that the
// node's allocatable cannot hold beside the pods it admitted is refused
// (OutOfmemory) before anything is made for it; and a node whose image
// filesystem is nearly full reports DiskPressure, is tainted, and refuses new
// pods before making anything for them.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { parseQuantity } from '../../provider/kube/quantity.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import {
  createTenant,
  hostTracesOf,
  NO_TRACES,
  nodes,
  pidsWhere,
  pods,
  poll,
  qemuPidsOf,
  smokeVmiSpec,
  startAgent,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  virtualMachineInstances,
  vmiOf,
  waitFor,
  waitForGone,
  type AgentProcess,
  TEST_GUEST_IMAGE,
} from './framework/index.js';

const NODE = 'vkvm-e2e-budget';
const PRESSED = 'vkvm-e2e-pressed';
const NS = 'e2e-budget';

function pod(name: string, image: string, extra: Partial<V1Pod['spec']> = {}): V1Pod {
  const p = testGuestPod({
    name,
    node: NODE,
    image,
    restartPolicy: 'Never',
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '128Mi' } },
  });
  return { ...p, metadata: { ...p.metadata, namespace: NS }, spec: { ...p.spec!, ...extra } };
}

/** What is left on the node of a pod's VM: its directory, network namespace, launcher and QEMU. */
function leftovers(agent: AgentProcess, uid: string) {
  return {
    vmDir: existsSync(join(agent.stateDir, 'vms', uid)),
    netns: existsSync(`/run/netns/vkvm-${uid}`),
    launchers: pidsWhere((argv) => argv.some((a, i) => a === '--uid' && argv[i + 1] === uid)),
    qemu: qemuPidsOf(uid),
  };
}

t.test("a tenant is held to the node's budget", async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const scratch = await mkdtemp(join(tmpdir(), 'vkvm-e2e-budget-'));
  t.teardown(() => rm(scratch, { recursive: true, force: true }));
  await chmod(scratch, 0o755);

  // An image server the operator allowed that sends one byte every quarter second, forever.
  const requests: string[] = [];
  // Downloads whose connection the agent closed.
  const closed: string[] = [];
  const trickle = createServer((req, res) => {
    requests.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const timer = setInterval(() => res.write('x'), 250);
    res.on('close', () => {
      clearInterval(timer);
      closed.push(req.url ?? '');
    });
  });
  await new Promise<void>((resolve) => trickle.listen(0, '127.0.0.2', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        trickle.closeAllConnections();
        trickle.close(() => resolve());
      }),
  );
  const slowBase = `http://127.0.0.2:${(trickle.address() as AddressInfo).port}`;
  const agent = await startAgent(t, cluster, {
    nodeName: NODE,
    extraArgs: ['--image-download-allow=127.0.0.2/32', `--image-cache-dir=${join(scratch, 'cache')}`],
  });

  await t.test('nine slow image URLs hold no sync worker: another pod starts and deletions go through', async (t) => {
    const slow = [...Array(9).keys()].map((i) => `slow-${i}`);
    for (const name of slow) await tenant.core.createNamespacedPod({ namespace: NS, body: pod(name, `${slowBase}/${name}.img`) });
    // Three download at once (--max-parallel-image-pulls), the others wait their turn, none on a sync worker.
    await poll(
      'three downloads under way',
      async () => requests.length,
      (n) => n >= 3,
      { deadlineMs: 60_000 },
    );
    await tenant.core.createNamespacedPod({ namespace: NS, body: pod('quick', TEST_GUEST_IMAGE) });
    const quick = await waitFor(pods(tenant, NS, { name: 'quick' }), (p) => p.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: 120_000,
    });
    // One whose download runs, one still waiting for its turn (the last in line). The waiting one goes first and is gone
    // before the other's slot frees, so the slot goes to a pod still there.
    const downloading = slow.find((name) => requests.includes(`/${name}.img`))!;
    const queued = slow.findLast((name) => !requests.includes(`/${name}.img`))!;
    for (const name of [queued, downloading]) {
      await tenant.core.deleteNamespacedPod({ name, namespace: NS });
      await waitForGone(pods(tenant, NS, { name }), { deadlineMs: 60_000 });
    }
    const stillSlow = slow.filter((name) => name !== downloading && name !== queued);
    // The deleted pod's download was aborted: its slot went to the next in line.
    await poll(
      'a fourth download begun',
      async () => requests.length,
      (n) => n >= 4,
      { deadlineMs: 60_000 },
    );
    const waiting = await tenant.core.readNamespacedPod({ name: stillSlow.at(-1)!, namespace: NS });
    t.match(
      {
        quick: quick.status?.phase,
        slow: { phase: waiting.status?.phase, state: waiting.status?.containerStatuses?.[0]?.state },
        downloads: requests.length,
        closed: closed.join(' '),
      },
      {
        quick: 'Running',
        slow: { phase: 'Pending', state: { waiting: { reason: 'ContainerCreating' } } },
        downloads: 4,
        closed: new RegExp(`^/${downloading}\\.img$`),
      },
      'the quick pod runs, the deleted ones are gone and the deleted download stopped while the slow ones still download, three at a time',
    );
    for (const name of ['quick', ...stillSlow])
      await tenant.core.deleteNamespacedPod({ name, namespace: NS, body: { gracePeriodSeconds: 0 } });
  });

  // The controllers make the launcher pods; they run in this test process.
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  await t.test('a VMI whose emptyDisk exceeds its ephemeral-storage limit is refused, naming the limit, with nothing made', async (t) => {
    const spec = smokeVmiSpec();
    spec.nodeSelector = { 'kubernetes.io/hostname': NODE };
    spec.domain.resources = { requests: { memory: '128Mi' }, limits: { 'ephemeral-storage': '32Mi' } };
    await tenant.custom.createNamespacedCustomObject({
      group: 'kubevirt.io',
      version: 'v1',
      namespace: NS,
      plural: 'virtualmachineinstances',
      body: vmiOf('too-big', spec),
    });
    const vmi = await waitFor(
      virtualMachineInstances(tenant, NS, { name: 'too-big' }),
      (v) => v.status?.conditions?.some((c) => c.type === 'Synchronized' && c.status === 'False') ?? false,
      { what: 'not synchronized', deadlineMs: 120_000 },
    );
    const launcher = (await tenant.core.listNamespacedPod({ namespace: NS, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` }))
      .items[0]!;
    t.match(
      {
        synchronized: vmi.status?.conditions?.find((c) => c.type === 'Synchronized'),
        resources: launcher.spec?.containers[0]?.resources,
        left: leftovers(agent, launcher.metadata!.uid!),
      },
      {
        synchronized: {
          status: 'False',
          reason: 'InvalidVMSpec',
          message:
            /spec\.domain\.resources\.limits\.ephemeral-storage: the VM's disks take 64Mi .*emptydisk 64Mi.*more than the limit of 32Mi/,
        },
        resources: { requests: { 'ephemeral-storage': '32Mi' }, limits: { 'ephemeral-storage': '32Mi' } },
        left: { vmDir: false, netns: false, launchers: [], qemu: [] },
      },
      'the launcher pod charges the disks up to the limit; the node refuses the VM before making anything',
    );
  });

  await t.test(
    "a pod bound past the scheduler whose memory request exceeds what is left of the node's allocatable fails OutOfmemory, with nothing made",
    async (t) => {
      // One admitted pod holds its share; the greedy one would fit on the empty node, but not beside it.
      await tenant.core.createNamespacedPod({ namespace: NS, body: pod('holder', TEST_GUEST_IMAGE, { nodeName: NODE }) });
      await waitFor(pods(tenant, NS, { name: 'holder' }), (p) => p.status?.phase === 'Running', { what: 'Running', deadlineMs: 120_000 });
      const capacity = parseQuantity((await cluster.clients.core.readNode({ name: NODE })).status!.allocatable!.memory!)!;
      const greedy = String(capacity - 64 * 2 ** 20);
      const created = await tenant.core.createNamespacedPod({
        namespace: NS,
        body: pod('greedy', TEST_GUEST_IMAGE, {
          nodeName: NODE,
          containers: [{ name: 'vm', image: TEST_GUEST_IMAGE, resources: { requests: { memory: greedy }, limits: { memory: greedy } } }],
        }),
      });
      const refused = await waitFor(pods(tenant, NS, { name: 'greedy' }), (p) => p.status?.phase === 'Failed', {
        what: 'Failed',
        deadlineMs: 60_000,
      });
      const used = Number(/used: (\d+),/.exec(refused.status?.message ?? '')?.[1]);
      // The Event is recorded beside the status write, not before it.
      const events = await poll(
        'an OutOfmemory event',
        () => tenant.core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=greedy' }),
        (list) => list.items.some((e) => e.reason === 'OutOfmemory'),
        { deadlineMs: 30_000 },
      ).catch(() => tenant.core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=greedy' }));
      t.match(
        {
          status: { phase: refused.status?.phase, reason: refused.status?.reason, message: refused.status?.message },
          holderCounted: used >= 128 * 2 ** 20,
          event: events.items.find((e) => e.reason === 'OutOfmemory'),
          left: await hostTracesOf(agent, created.metadata!.uid!),
        },
        {
          status: {
            phase: 'Failed',
            reason: 'OutOfmemory',
            message: new RegExp(
              `^Pod was rejected: Node didn't have enough resource: memory, requested: ${greedy}, used: \\d+, capacity: ${capacity}$`,
            ),
          },
          holderCounted: true,
          event: { type: 'Warning', message: /Node didn't have enough resource: memory/ },
          left: NO_TRACES,
        },
        'refused as the kubelet refuses, counting the admitted pod, with no launcher, QEMU, cgroup or network for it',
      );
      await tenant.core.deleteNamespacedPod({ name: 'holder', namespace: NS, body: { gracePeriodSeconds: 0 } });
    },
  );

  await t.test(
    'a node whose image filesystem is nearly full has DiskPressure and the disk-pressure taint, and refuses a new pod before making anything',
    async (t) => {
      // A small filesystem for the image store, filled past the imagefs threshold (15% free) once the agent runs.
      const imageFs = join(scratch, 'imagefs');
      await mkdir(imageFs);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'vkvm-e2e-imagefs', imageFs]);
      t.teardown(() => execFileSync('umount', ['-l', imageFs]));
      const pressed = await startAgent(t, cluster, {
        nodeName: PRESSED,
        extraArgs: [`--image-store-dir=${imageFs}`, `--image-cache-dir=${join(scratch, 'cache-pressed')}`],
        // 8 MiB hold no test guest; the pod below is refused before any image is looked at.
        testGuestImages: false,
      });
      await writeFile(join(imageFs, 'filler'), Buffer.alloc(7 * 2 ** 20 + 512 * 1024));
      const node = await waitFor(
        nodes(cluster.clients, { name: PRESSED }),
        (n) =>
          (n.status?.conditions?.some((c) => c.type === 'DiskPressure' && c.status === 'True') ?? false) &&
          (n.spec?.taints?.some((x) => x.key === 'node.kubernetes.io/disk-pressure') ?? false),
        { what: 'DiskPressure and its taint', deadlineMs: 90_000 },
      );
      // Bound by hand, past the scheduler and its taint check: the node itself must refuse it.
      const created = await tenant.core.createNamespacedPod({
        namespace: NS,
        body: pod('pressed', TEST_GUEST_IMAGE, { nodeName: PRESSED }),
      });
      const refused = await waitFor(pods(tenant, NS, { name: 'pressed' }), (p) => p.status?.phase === 'Failed', {
        what: 'Failed',
        deadlineMs: 60_000,
      });
      const ki = (q: string | undefined) => Number.parseInt(q ?? '0', 10);
      const capacityKi = ki(node.status?.capacity?.['ephemeral-storage']);
      t.match(
        {
          condition: node.status?.conditions?.find((c) => c.type === 'DiskPressure'),
          taint: node.spec?.taints?.find((x) => x.key === 'node.kubernetes.io/disk-pressure'),
          // The state filesystem less the 10% hard eviction threshold, to the Ki.
          allocatableNinetyPercent: Math.abs(ki(node.status?.allocatable?.['ephemeral-storage']) - capacityKi * 0.9) <= 1,
          status: refused.status,
          left: leftovers(pressed, created.metadata!.uid!),
        },
        {
          condition: {
            status: 'True',
            reason: 'KubeletHasDiskPressure',
            message: /the image filesystem \(.*imagefs\) has less than 15% of its space free/,
          },
          taint: { effect: 'NoSchedule' },
          allocatableNinetyPercent: true,
          status: { phase: 'Failed', reason: 'Evicted', message: 'Pod was rejected: The node had condition: [DiskPressure]. ' },
          left: { vmDir: false, netns: false, launchers: [], qemu: [] },
        },
        'refused as the kubelet refuses, with nothing of the pod on the node',
      );
    },
  );
});
