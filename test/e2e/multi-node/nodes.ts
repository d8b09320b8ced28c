// The two vkvm nodes of `vkvm up --nodes 2` end to end, run as the README runs it: both nodes
// Ready, node 2 a simulated host joined through vkvm join; a tenant's VM on
// each node by hostname, each fetching HTTP from the other by pod IP,
// unNATed; node 2's identity and files kept off node 1's VMIs and launchers;
// a tenant's claim provisioned on the node picked for it by that node's CSI
// driver and provisioner, and grown under its running VM; a tenant's
// DataVolumes, and issue #27's flow on them (a VM's imported root and blank
// data disk across restarts and an agent restart, a clone, a snapshot
// restored, all gone after delete); KubeVirt's storage examples (vmi-pvc,
// vm-alpine-datavolume) applied by the tenant, as KubeVirt ships them.
import type { Test } from 'tap';
import { AppsV1Api, type V1Pod } from '@kubernetes/client-node';
import { loadKubeConfig, makeClients, mergePatch } from '../../../provider/kube/client.js';
import type { VirtualMachineInstance } from '../../../provider/kubevirt/types.js';
import { claimsOnBothNodes, vmiOnDefaultClassClaim } from '../nodes-storage.js';
import { claimExpandedUnderRunningVm } from '../nodes-expansion.js';
import { dataVolumeBoundaries } from '../nodes-datavolumes.js';
import { dataVolumeFlow } from '../nodes-datavolume-flow.js';
import { cloneSourceAuthorization } from '../nodes-clone-source.js';
import { vmiOnBlockClaim } from '../nodes-block.js';
import { kubevirtStorageExamples } from '../nodes-kubevirt-examples.js';
import {
  condition,
  createTenant,
  isRunningAndReady,
  kubeconfigFile,
  nodes,
  poll,
  pods,
  serviceAccounts,
  smokeVmiSpec,
  testGuestPod,
  virtualMachineInstances,
  waitFor,
  type UpCluster,
  apiOutcome,
} from '../framework/index.js';

const NS = 'e2e-nodes';
const BOOT_DEADLINE_MS = 300_000;
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS, plural: 'virtualmachineinstances' };

const vmPod = (name: string, node: string): V1Pod => testGuestPod({ name, node, terminationGracePeriodSeconds: 1 });

/** `examplesRegistry`: host:port for KubeVirt's examples' registry, which every node reaches and lists as local. */
export async function nodesSuite(t: Test, up: UpCluster, o: { examplesRegistry: string }): Promise<void> {
  const [a, b] = up.nodes as [UpCluster['nodes'][0], UpCluster['nodes'][0]];
  const admin = up.clients;

  await t.test('both nodes are Ready at their segment addresses; node 2 joined with node credentials', async (t) => {
    for (const node of [a, b]) {
      const n = await waitFor(nodes(admin, { name: node.name }), (n) => condition(n, 'Ready') === 'True', { what: 'Ready' });
      t.equal(
        n.status?.addresses?.find((addr) => addr.type === 'InternalIP')?.address,
        node.address,
        `${node.name} is Ready with InternalIP ${node.address}`,
      );
    }
    const joined = (await b.exec(['cat', `${b.simulated!.stateDir}/join.json`])).stdout;
    t.match(JSON.parse(joined), { nodeName: b.name, server: `https://${a.address}:6443` }, 'node 2 holds a join record');
    t.equal((await b.exec(['hostname'])).stdout.trim(), b.name, 'node 2 has a host name of its own');
  });

  const podsWatch = (name: string) => pods(admin, NS, { name });
  await admin.core.createNamespace({ body: { metadata: { name: NS } } });
  // Until the service account controller made it, a pod is refused.
  await waitFor(serviceAccounts(admin, NS, { name: 'default' }), () => true, { what: 'made by the service account controller' });
  const tenant = await createTenant(admin, NS);
  const tenantKubeconfig = await kubeconfigFile(t, tenant);
  const kubectl = (args: string[]) => up.kubectl(['-n', NS, ...args], tenantKubeconfig);

  await t.test("a tenant's claim gets the default class, waits for its first consumer, and is provisioned on the node picked for it", (t) =>
    claimsOnBothNodes(t, { admin, tenant, namespace: NS, nodes: [a, b], upStateDir: up.stateDir }),
  );

  // Node 2's storage, as the tenant: what each storage case below is given.
  const storageCase = { admin, tenant, namespace: NS, node: b, upStateDir: up.stateDir, bootDeadlineMs: BOOT_DEADLINE_MS, kubectl };
  await t.test(
    "a VMI on a claim of the default class: the scheduler picks the node, its provisioner and the agent's CSI node side serve it",
    (t) =>
      vmiOnDefaultClassClaim(t, {
        ...storageCase,
        whileRunning: (vm) =>
          t
            .test("the tenant grows the running VM's claim: the claim's status follows, the guest sees the larger disk", (t) =>
              claimExpandedUnderRunningVm(t, {
                admin,
                tenant,
                namespace: NS,
                ...vm,
                fromMiB: vm.claimMiB,
                toMiB: vm.claimMiB + 32,
                kubectl,
              }),
            )
            .then(() => undefined),
      }),
  );

  await t.test("a tenant's DataVolume: CDI's phases and conditions, its own claim; status and other namespaces out of reach", (t) =>
    dataVolumeBoundaries(t, storageCase),
  );
  await t.test(
    "a tenant's DataVolume cloning another namespace's claim: refused without datavolumes/source there, naming the field; once granted, its claim holds the source's bytes",
    (t) => cloneSourceAuthorization(t, storageCase),
  );
  await t.test(
    "a VM on DataVolumes (root imported with a pull secret, blank data): the guest's marker survives stop/start and an agent restart with virtctl restart; a clone of its root boots; a snapshot of its data holds the marker; nothing left after delete",
    (t) =>
      dataVolumeFlow(t, {
        ...storageCase,
        nodeIdentity: makeClients(loadKubeConfig(`${b.simulated!.stateDir}/kubeconfig`)),
        tenantKubeconfig,
      }),
  );

  await t.test(
    "KubeVirt's vmi-pvc and vm-alpine-datavolume as the tenant applies them: the missing class `local` named, then both boot from imported disks",
    (t) => kubevirtStorageExamples(t, { ...storageCase, registryHost: o.examplesRegistry }),
  );

  await t.test(
    "a VMI on a Block-mode claim, booting from a Block DataVolume imported from the registry: the device is QEMU's disk, the guest's marker reaches the volume, the stats summary reports the volumes",
    (t) =>
      vmiOnBlockClaim(t, {
        ...storageCase,
        adminKubectl: (args) => up.kubectl(args),
      }),
  );

  await t.test('a tenant runs a VM on each node by hostname; each fetches from the other by pod IP, seen as its own pod IP', async (t) => {
    for (const [name, node] of [
      ['vm-a', a.name],
      ['vm-b', b.name],
    ] as const) {
      await tenant.core.createNamespacedPod({ namespace: NS, body: vmPod(name, node) });
    }
    const [podA, podB] = await Promise.all(
      ['vm-a', 'vm-b'].map((name) =>
        waitFor(podsWatch(name), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
          what: 'Running and Ready with an IP',
          deadlineMs: BOOT_DEADLINE_MS,
        }),
      ),
    );
    t.same([podA!.spec?.nodeName, podB!.spec?.nodeName], [a.name, b.name], 'each VM on the node its nodeSelector names');
    const [ipA, ipB] = [podA!.status!.podIP!, podB!.status!.podIP!];
    // The guest's httpd runs CGI: a script that answers with the address the connection came from.
    const peerScript =
      'mkdir -p /www/cgi-bin && printf "#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho \\$REMOTE_ADDR\\n" >/www/cgi-bin/peer && chmod +x /www/cgi-bin/peer';
    for (const vm of ['vm-a', 'vm-b']) {
      // Ready comes from the serial console; the guest agent that exec needs may connect a moment later.
      const r = await poll(
        `${vm}'s guest agent`,
        () => kubectl(['exec', vm, '--', '/bin/sh', '-c', peerScript]),
        (r) => !r.stderr.includes('guest agent does not answer'),
        { deadlineMs: 120_000, intervalMs: 2000 },
      );
      t.same({ code: r.code, stderr: r.stderr }, { code: 0, stderr: '' }, `the peer-address page written in ${vm}`);
    }
    for (const [from, to, fromIP, toIP] of [
      ['vm-a', 'vm-b', ipA, ipB],
      ['vm-b', 'vm-a', ipB, ipA],
    ] as const) {
      const page = await kubectl(['exec', from, '--', '/bin/wget', '-q', '-O', '-', `http://${toIP}/`]);
      t.same({ code: page.code, out: page.stdout }, { code: 0, out: `vkvm-guest ${toIP}\n` }, `${from} fetches ${to}'s page by pod IP`);
      // httpd listens on a dual-stack socket: an IPv4 peer shows as [::ffff:a.b.c.d].
      const peer = await kubectl(['exec', from, '--', '/bin/wget', '-q', '-O', '-', `http://${toIP}/cgi-bin/peer`]);
      t.same(
        { code: peer.code, out: peer.stdout.trim().replace(/^\[::ffff:(.*)\]$/, '$1') },
        { code: 0, out: fromIP },
        `${to} sees ${from}'s own pod IP (no NAT)`,
      );
    }
  });

  await t.test('a Deployment of 4 VM pods spread by hostname lands 2 and 2', async (t) => {
    const apps = tenant.kc.makeApiClient(AppsV1Api);
    const template = testGuestPod({ name: 'spread', terminationGracePeriodSeconds: 1 });
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: 'spread' },
        spec: {
          replicas: 4,
          selector: { matchLabels: { app: 'spread' } },
          template: {
            metadata: { labels: { app: 'spread' } },
            spec: {
              ...template.spec!,
              topologySpreadConstraints: [
                {
                  maxSkew: 1,
                  topologyKey: 'kubernetes.io/hostname',
                  whenUnsatisfiable: 'DoNotSchedule',
                  labelSelector: { matchLabels: { app: 'spread' } },
                },
              ],
            },
          },
        },
      },
    });
    // Placement is the scheduler's: once the four are bound, where they went is the answer.
    const bound = await poll(
      'the four pods bound',
      async () => (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: 'app=spread' })).items,
      (ps) => ps.length === 4 && ps.every((p) => p.spec?.nodeName),
      { deadlineMs: 60_000 },
    );
    const perNode = (node: string) => bound.filter((p) => p.spec?.nodeName === node).length;
    t.same({ [a.name]: perNode(a.name), [b.name]: perNode(b.name) }, { [a.name]: 2, [b.name]: 2 }, 'two on each node');
    await apps.deleteNamespacedDeployment({ namespace: NS, name: 'spread' });
    await poll(
      'the spread pods gone',
      async () => (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: 'app=spread' })).items,
      (ps) => ps.length === 0,
      { deadlineMs: 120_000 },
    );
  });

  await t.test("node 2's identity and files do not reach node 1's VMIs and launchers", async (t) => {
    const spec = smokeVmiSpec();
    spec.nodeSelector = { 'kubernetes.io/hostname': a.name };
    await tenant.custom.createNamespacedCustomObject({
      ...KV,
      body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'vmi-a' }, spec },
    });
    const vmi: VirtualMachineInstance = await waitFor(
      virtualMachineInstances(admin, NS, { name: 'vmi-a' }),
      (v) => v.status?.nodeName === a.name && v.status?.phase === 'Running',
      { what: 'Running on node 1', deadlineMs: BOOT_DEADLINE_MS },
    );
    const nodeB = makeClients(loadKubeConfig(`${b.simulated!.stateDir}/kubeconfig`));
    t.match(
      await apiOutcome(() => nodeB.custom.getNamespacedCustomObject({ ...KV, name: 'vmi-a' })),
      { code: 403 },
      "node 2 cannot read node 1's VMI",
    );
    t.match(
      await apiOutcome(() =>
        nodeB.custom.patchNamespacedCustomObjectStatus({ ...KV, name: 'vmi-a', body: { status: { phase: 'Failed' } } }, mergePatch),
      ),
      { code: 403 },
      "node 2 cannot patch node 1's VMI status",
    );
    const launcherPod = (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: 'kubevirt.io=virt-launcher' })).items[0]!;
    const uid = launcherPod.metadata!.uid!;
    const socket = `/run/vkvm/launchers/${uid}.sock`;
    t.equal((await a.exec(['test', '-S', socket])).code, 0, `node 1 has the VMI's launcher socket ${socket}`);
    const seen = await b.exec([
      'sh',
      '-c',
      `ls ${socket} ${up.stateDir}/vms/${uid} ${up.stateDir}/kubeconfig ${up.stateDir}/cluster 2>&1; true`,
    ]);
    t.notMatch(
      seen.stdout,
      /launcher\.sock|launcher\.json|apiVersion|pki/,
      "node 2 sees none of node 1's sockets, VM files or the admin kubeconfig",
    );
    t.match(seen.stdout, /No such file or directory/, 'they do not exist for node 2');
    t.equal(vmi.status?.nodeName, a.name, 'the VMI stayed on node 1');
  });
}
