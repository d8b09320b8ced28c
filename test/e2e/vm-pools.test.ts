// Issue 28's replicas and RestartRequired, as a tenant (edit in one
// namespace) on the real control plane, the controllers, the subresource API
// (under the shipped vkvm:controllers role) and one node agent booting the
// test guest:
// - what KubeVirt's admission refuses (a selector that misses the template,
//   a template without memory, a changed pool selector) and a field vkvm
//   does not realize are refused, naming the field;
// - a VirtualMachinePool of 2 scales to 3 with `kubectl scale` (its scale
//   subresource, the selector an HPA would read), each VM named by its index
//   and given its own cloud-init Secret; the namespace's quota holds: a VM
//   whose launcher pod the pods quota refuses waits (its VMI says why), a VM
//   the VM-count quota refuses is the pool's ReplicaFailure, and nothing
//   loops; then back to 1;
// - a HorizontalPodAutoscaler (autoscaling/v2, CPU utilization) scales a pool
//   of 1 whose guest burns CPU to 2, on the pods' CPU that metrics-server
//   (built from its Go module, run as vkvm up runs it) scrapes from the
//   agent's /metrics/resource; the tenant reads its own namespace's metrics
//   and not another's;
// - KubeVirt's vmi-replicaset-cirros and vm-pool-cirros examples, with only
//   their image rewritten (test/e2e/fixtures/kubevirt-replica-examples/),
//   run all their replicas Ready;
// - a running VM whose template changes shows RestartRequired, which
//   `virtctl restart` clears.
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startMetricsServer } from '../../provider/cluster-services/metrics-server.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachinePool } from '../../provider/kubevirt/replica-types.js';
import type { VirtualMachine } from '../../provider/kubevirt/types.js';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import { defaultRouteAddress } from '../../provider/node/default-address.js';
import { packageRoot } from '../../provider/package-root.js';
import { startSubresourceApi } from '../../provider/subresources/start.js';
import { GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import { ensureVirtctl, runVirtctl } from '../helpers/virtctl.js';
import {
  condition,
  controllersIdentity,
  createTenant,
  poll,
  startAgent,
  startTestCluster,
  tenantKubectl,
  testLog,
  testNamespace,
  virtualMachineInstanceReplicaSets,
  virtualMachinePools,
  waitFor,
  waitForAll,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-pools';
const NS = 'e2e-vm-pools';
const BOOT_DEADLINE_MS = 300_000;
const FIXTURES = join(packageRoot(), 'test', 'e2e', 'fixtures', 'kubevirt-replica-examples');

/** A pool of the test guest whose VMs each read cloud-init from the Secret `<pool>-userdata-<index>`. */
const scaledPool = (name: string, replicas: number): VirtualMachinePool => {
  const labels = { 'kubevirt.io/vmpool': name };
  return {
    apiVersion: 'pool.kubevirt.io/v1alpha1',
    kind: 'VirtualMachinePool',
    metadata: { name },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      nameGeneration: { appendIndexToSecretRefs: true },
      virtualMachineTemplate: {
        metadata: { labels },
        spec: {
          runStrategy: 'Always',
          template: {
            metadata: { labels },
            spec: {
              domain: {
                resources: { requests: { memory: '128Mi' } },
                devices: {
                  disks: [
                    { name: 'containerdisk', disk: { bus: 'virtio' } },
                    { name: 'cloudinit', disk: { bus: 'virtio' } },
                  ],
                },
              },
              terminationGracePeriodSeconds: 0,
              volumes: [
                { name: 'containerdisk', containerDisk: { image: TEST_GUEST_IMAGE } },
                { name: 'cloudinit', cloudInitNoCloud: { secretRef: { name: `${name}-userdata` } } },
              ],
            },
          },
        },
      },
    },
  };
};

const userData = (vm: string) => `#!/bin/sh\necho 'cloud-init of ${vm}'\n`;

t.test('VirtualMachinePools and VirtualMachineInstanceReplicaSets as a tenant', async (t) => {
  const virtctlBin = await ensureVirtctl();
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const address = await defaultRouteAddress();
  if (!address) throw new Error('the host needs a default route: the apiserver dials the subresource API there');
  const api = await startSubresourceApi(cluster.clients, testLog, { address, port: 0 });
  t.teardown(() => api.close());
  const metricsServer = await startMetricsServer({
    clusterBinary: cluster.binary,
    address,
    clients: cluster.clients,
    dir: join(cluster.stateDir, 'metrics-server'),
    log: testLog,
  });
  t.teardown(() => metricsServer.stop());
  // Under the shipped vkvm:controllers role, so deploy/rbac.yaml is what they run with.
  const controllers = startControllers(await controllersIdentity(cluster), testLog, {
    retryPeriodMs: 500,
    onLeading: () => api.register(),
  });
  t.teardown(() => controllers.stop());
  await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const kubectl = await tenantKubectl(t, cluster, tenant);
  const kubeconfig = join(t.testdir(), 'tenant.kubeconfig');
  await writeFile(kubeconfig, tenant.kc.exportConfig());
  const virtctl = (args: string[]) => runVirtctl(virtctlBin, [`--kubeconfig=${kubeconfig}`, `--namespace=${NS}`, ...args]);
  const ok = async (t: Test, args: string[], input?: string) => {
    const r = await kubectl(args, input === undefined ? undefined : { input });
    t.equal(r.code, 0, `kubectl ${args.join(' ')} as the tenant: ${r.stderr}`);
    return r.stdout;
  };
  const vmsNamed = async (prefix: string) =>
    (
      (await tenant.custom.listNamespacedCustomObject({
        group: 'kubevirt.io',
        version: 'v1',
        namespace: NS,
        plural: 'virtualmachines',
      })) as {
        items: VirtualMachine[];
      }
    ).items
      .map((vm) => vm.metadata.name!)
      .filter((n) => n.startsWith(prefix))
      .sort();
  const pool = (name: string) => virtualMachinePools(tenant, NS, { name });
  const readyPool = (name: string, n: number) =>
    waitFor(pool(name), (p) => p.status?.replicas === n && p.status.readyReplicas === n, {
      what: `${n} replicas, all Ready`,
      deadlineMs: BOOT_DEADLINE_MS,
    });
  /** The console of a VM's launcher pod, once it holds `text` (kubectl logs as the tenant). */
  const consoleWith = async (vmi: string, text: string) => {
    const pod = await waitFor(ns.pods({ labelSelector: `vm.kubevirt.io/name=${vmi}` }), (p) => p.status?.phase === 'Running', {
      what: `${vmi}'s launcher pod running`,
      deadlineMs: BOOT_DEADLINE_MS,
    });
    const r = await poll(
      `${text} in ${vmi}'s console`,
      () => kubectl(['logs', '-n', NS, pod.metadata!.name!]),
      (l) => l.code === 0 && l.stdout.includes(text),
      { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 1000 },
    );
    return r.stdout.includes(text);
  };

  await t.test("what KubeVirt's admission refuses is refused, naming the field; nothing is created", async (t) => {
    const refused = async (manifest: object) => (await kubectl(['apply', '-n', NS, '-f', '-'], { input: JSON.stringify(manifest) })).stderr;
    const good = scaledPool('refused', 1);
    const otherSelector = { ...good, spec: { ...good.spec, selector: { matchLabels: { app: 'other' } } } };
    const unknownField = { ...good, spec: { ...good.spec, updateStrategy: { unmanaged: {} } } };
    const noMemory = scaledPool('refused', 1);
    delete noMemory.spec.virtualMachineTemplate.spec.template.spec.domain.resources;
    t.match(
      { selector: await refused(otherSelector), unknown: await refused(unknownField), memory: await refused(noMemory) },
      {
        selector: /spec\.selector: selector does not match labels\./,
        unknown: /unknown field "spec\.updateStrategy"/,
        memory: /spec\.virtualMachineTemplate\.spec\.template\.spec\.domain\.resources\.requests\.memory/,
      },
      'a selector that misses the template, a field vkvm does not realize, a template without memory',
    );
    await ok(t, ['apply', '-n', NS, '-f', '-'], JSON.stringify({ ...good, spec: { ...good.spec, replicas: 0 } }));
    const moved = {
      ...good,
      spec: { ...good.spec, replicas: 0, selector: { matchLabels: { ...good.spec.selector.matchLabels, more: 'x' } } },
    };
    t.match(await refused(moved), /spec\.selector: selector is immutable after creation\./, "a pool's selector is fixed once created");
    await ok(t, ['delete', '-n', NS, 'vmpool/refused']);
    t.same(await vmsNamed('refused'), [], 'no VM was made');
  });

  await t.test('a pool of 2 scales to 3 with kubectl scale, within the quota, and back to 1', async (t) => {
    for (const i of [0, 1, 2, 3, 4]) {
      await tenant.core.createNamespacedSecret({
        namespace: NS,
        body: { metadata: { name: `scaled-userdata-${i}` }, stringData: { userdata: userData(`scaled-${i}`) } },
      });
    }
    await ok(t, ['apply', '-n', NS, '-f', '-'], JSON.stringify(scaledPool('scaled', 2)));
    const two = await readyPool('scaled', 2);
    t.same(
      { vms: await vmsNamed('scaled'), labelSelector: two.status?.labelSelector },
      { vms: ['scaled-0', 'scaled-1'], labelSelector: 'kubevirt.io/vmpool=scaled' },
      'VMs named by index from 0; the canonical selector for an HPA',
    );

    await ok(t, ['scale', '-n', NS, 'vmpool/scaled', '--replicas=3']);
    await readyPool('scaled', 3);
    const scale = JSON.parse(
      await ok(t, ['get', '--raw', `/apis/pool.kubevirt.io/v1alpha1/namespaces/${NS}/virtualmachinepools/scaled/scale`]),
    );
    t.match(
      scale,
      { kind: 'Scale', spec: { replicas: 3 }, status: { replicas: 3, selector: 'kubevirt.io/vmpool=scaled' } },
      'the scale subresource an HPA reads and writes',
    );
    t.same(await vmsNamed('scaled'), ['scaled-0', 'scaled-1', 'scaled-2'], 'the third VM takes the next index');
    t.same(
      await Promise.all(['scaled-0', 'scaled-1', 'scaled-2'].map((vm) => consoleWith(vm, `cloud-init of ${vm}`))),
      [true, true, true],
      'each VM ran the user data of its own Secret, <name>-<index>',
    );

    // The namespace's quota: three launcher pods, four VMs; enforced once the quota controller has counted.
    // The quota controller counts VMs only once its monitor of them runs (its discovery comes every 30 s), and a quota
    // made before then is counted again only at its 5-minute resync: one still uncounted after 30 s is made anew.
    const quotas = cluster.clients.core;
    const dropQuota = () => quotas.deleteNamespacedResourceQuota({ namespace: NS, name: 'vms' }).catch(() => undefined);
    t.teardown(dropQuota);
    await poll(
      'the quota counted',
      async () => {
        const q = await quotas.readNamespacedResourceQuota({ namespace: NS, name: 'vms' }).catch(() => undefined);
        if (!q) {
          await quotas.createNamespacedResourceQuota({
            namespace: NS,
            body: { metadata: { name: 'vms' }, spec: { hard: { pods: '3', 'count/virtualmachines.kubevirt.io': '4' } } },
          });
        } else if (
          !q.status?.used?.['count/virtualmachines.kubevirt.io'] &&
          Date.now() - q.metadata!.creationTimestamp!.getTime() > 30_000
        ) {
          await dropQuota();
        }
        return q;
      },
      (q) => q?.status?.used?.['count/virtualmachines.kubevirt.io'] === '3' && q.status.used.pods === '3',
      { deadlineMs: 180_000, intervalMs: 2000 },
    );
    await ok(t, ['scale', '-n', NS, 'vmpool/scaled', '--replicas=5']);
    const refused = await waitFor(pool('scaled'), (p) => condition(p, 'ReplicaFailure') === 'True', { what: 'ReplicaFailure' });
    t.match(
      refused.status?.conditions?.find((c) => c.type === 'ReplicaFailure'),
      { reason: 'FailedScaleOut', message: /^Error during scale out: .*exceeded quota/ },
      "the VM the VM-count quota refuses is the pool's ReplicaFailure, as KubeVirt words it",
    );
    // Two creates raced for the quota's last VM; either name may hold it.
    const [fourth] = (await vmsNamed('scaled')).filter((n) => !['scaled-0', 'scaled-1', 'scaled-2'].includes(n));
    const waiting = await waitFor(ns.vmi(fourth ?? 'scaled-3'), (v) => condition(v, 'Synchronized') === 'False', {
      what: 'the launcher pod refused',
    });
    t.match(
      waiting.status,
      { phase: 'Pending', conditions: [{ type: 'Synchronized', reason: 'FailedCreate', message: /exceeded quota/ }] },
      "the fourth VM's launcher pod, over the pods quota, leaves its VMI Pending and saying why",
    );
    // Nothing loops: ten seconds on, still four VMs, four VMIs, three launcher pods.
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    const vmis = await tenant.custom.listNamespacedCustomObject({
      group: 'kubevirt.io',
      version: 'v1',
      namespace: NS,
      plural: 'virtualmachineinstances',
    });
    const pods = await tenant.core.listNamespacedPod({ namespace: NS });
    t.same(
      {
        vms: (await vmsNamed('scaled')).length,
        vmis: (vmis as { items: unknown[] }).items.length,
        pods: pods.items.length,
        status: (await waitFor(pool('scaled'), () => true)).status?.replicas,
      },
      { vms: 4, vmis: 4, pods: 3, status: 4 },
      'the pool stops at what the quota allows and creates nothing more',
    );
    await dropQuota();

    await ok(t, ['scale', '-n', NS, 'vmpool/scaled', '--replicas=1']);
    const one = await waitFor(
      pool('scaled'),
      (p) => p.status?.replicas === 1 && p.status.readyReplicas === 1 && condition(p, 'ReplicaFailure') === undefined,
      {
        what: 'one replica left, Ready, no failure',
        deadlineMs: 120_000,
      },
    );
    t.same({ vms: (await vmsNamed('scaled')).length, replicas: one.status?.replicas }, { vms: 1, replicas: 1 }, 'scaled in to one VM');
    await ok(t, ['delete', '-n', NS, 'vmpool/scaled', '--wait=false']);
    await waitForGone(ns.vmis({ labelSelector: 'kubevirt.io/vmpool=scaled' }), { what: 'garbage-collected', deadlineMs: 120_000 });
  });

  await t.test('an HPA scales a pool whose guest burns CPU from 1 to 2, on metrics-server', async (t) => {
    // The guest's cloud-init starts a busy loop: one vCPU busy is QEMU's TCG thread busy in the pod's cgroup.
    for (const i of [0, 1]) {
      await tenant.core.createNamespacedSecret({
        namespace: NS,
        body: {
          metadata: { name: `busy-userdata-${i}` },
          stringData: { userdata: `#!/bin/sh\nsh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null &\necho 'cloud-init of busy-${i}'\n` },
        },
      });
    }
    const busy = scaledPool('busy', 1);
    busy.spec.virtualMachineTemplate.spec.template.spec.domain.resources = { requests: { memory: '128Mi', cpu: '100m' } };
    await ok(t, ['apply', '-n', NS, '-f', '-'], JSON.stringify(busy));
    await readyPool('busy', 1);
    t.ok(await consoleWith('busy-0', 'cloud-init of busy-0'), 'the busy loop started');
    // Two scrapes make a rate: the pod's CPU shows once metrics-server has scraped the agent twice.
    const top = await poll(
      "the pod's CPU in kubectl top",
      () => kubectl(['top', 'pod', '-n', NS, '-l', 'kubevirt.io/vmpool=busy', '--no-headers']),
      (r) => r.code === 0 && /^virt-launcher-busy-0-\S+\s+\d+m\s/.test(r.stdout),
      { deadlineMs: 90_000, intervalMs: 3000 },
    );
    const millicores = Number(/\s(\d+)m\s/.exec(top.stdout)![1]);
    t.ok(millicores > 50, `kubectl top as the tenant: the pod uses ${millicores}m, over half its 100m request`);
    const hpa = {
      apiVersion: 'autoscaling/v2',
      kind: 'HorizontalPodAutoscaler',
      metadata: { name: 'busy' },
      spec: {
        scaleTargetRef: { apiVersion: 'pool.kubevirt.io/v1alpha1', kind: 'VirtualMachinePool', name: 'busy' },
        minReplicas: 1,
        maxReplicas: 2,
        metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 50 } } }],
      },
    };
    await ok(t, ['apply', '-n', NS, '-f', '-'], JSON.stringify(hpa));
    // The HPA controller syncs every 15 s and counts a pod once a metric's window starts after it turned Ready.
    const scaled = await waitFor(pool('busy'), (p) => p.spec.replicas === 2, { what: 'scaled to 2 by the HPA', deadlineMs: 180_000 });
    const status = JSON.parse(await ok(t, ['get', '-n', NS, 'hpa', 'busy', '-o', 'json'])).status as {
      desiredReplicas: number;
      currentMetrics?: Array<{ resource?: { current?: { averageUtilization?: number } } }>;
    };
    t.match(
      {
        replicas: scaled.spec.replicas,
        desired: status.desiredReplicas,
        utilization: status.currentMetrics?.[0]?.resource?.current?.averageUtilization,
      },
      { replicas: 2, desired: 2, utilization: Number },
      `the HPA wrote the pool's scale subresource (utilization ${status.currentMetrics?.[0]?.resource?.current?.averageUtilization}%)`,
    );
    t.ok((status.currentMetrics?.[0]?.resource?.current?.averageUtilization ?? 0) > 50, 'over the 50% target');
    const other = await kubectl(['get', '--raw', '/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods']);
    t.match(
      { code: other.code, stderr: other.stderr },
      { code: 1, stderr: /forbidden/i },
      "the tenant cannot read another namespace's metrics",
    );
    await ok(t, ['delete', '-n', NS, 'hpa/busy']);
    await ok(t, ['delete', '-n', NS, 'vmpool/busy', '--wait=false']);
    await waitForGone(ns.vmis({ labelSelector: 'kubevirt.io/vmpool=busy' }), { what: 'garbage-collected', deadlineMs: 120_000 });
  });

  const example = (name: string) => readFileSync(join(FIXTURES, `${name}.yaml`), 'utf8');

  await t.test("KubeVirt's vmi-replicaset-cirros runs its three VMIs", async (t) => {
    await ok(t, ['apply', '-n', NS, '-f', '-'], example('vmi-replicaset-cirros'));
    const rs = await waitFor(
      virtualMachineInstanceReplicaSets(tenant, NS, { name: 'vmi-replicaset-cirros' }),
      (r) => r.status?.replicas === 3 && r.status.readyReplicas === 3,
      { what: '3 replicas, all Ready', deadlineMs: BOOT_DEADLINE_MS },
    );
    const vmis = await waitForAll(ns.vmis({ labelSelector: 'kubevirt.io/vmReplicaSet=vmi-replicaset-cirros' }), (vs) => vs.length === 3, {
      what: 'three VMIs',
    });
    t.same(
      {
        labelSelector: rs.status?.labelSelector,
        vmis: vmis.map((v) => ({ generated: v.metadata.name!.startsWith('vmi-replicaset-cirros'), phase: v.status?.phase })),
      },
      {
        labelSelector: 'kubevirt.io/vmReplicaSet=vmi-replicaset-cirros',
        vmis: [0, 1, 2].map(() => ({ generated: true, phase: 'Running' })),
      },
      'three running VMIs named from the set',
    );
    t.ok(await consoleWith(vmis[0]!.metadata.name!, GUEST_BOOT_MARKER), 'the guest booted');
    await ok(t, ['delete', '-n', NS, 'vmirs/vmi-replicaset-cirros', '--wait=false']);
    await waitForGone(ns.vmis({ labelSelector: 'kubevirt.io/vmReplicaSet=vmi-replicaset-cirros' }), {
      what: 'garbage-collected',
      deadlineMs: 120_000,
    });
  });

  await t.test("KubeVirt's vm-pool-cirros runs its three VMs", async (t) => {
    await ok(t, ['apply', '-n', NS, '-f', '-'], example('vm-pool-cirros'));
    await readyPool('vm-pool-cirros', 3);
    t.same(await vmsNamed('vm-pool-cirros'), ['vm-pool-cirros-0', 'vm-pool-cirros-1', 'vm-pool-cirros-2'], 'named by index');
    const columns = await ok(t, ['get', '-n', NS, 'vmpool', 'vm-pool-cirros']);
    t.match(columns, /^NAME\s+DESIRED\s+CURRENT\s+READY\s+AGE\nvm-pool-cirros\s+3\s+3\s+3\s/, "kubectl get shows KubeVirt's columns");
    await ok(t, ['delete', '-n', NS, 'vmpool/vm-pool-cirros', '--wait=false']);
    await waitForGone(ns.vmis({ labelSelector: 'kubevirt.io/vmpool=vm-pool-cirros' }), { what: 'garbage-collected', deadlineMs: 120_000 });
  });

  await t.test('a running VM whose template changed shows RestartRequired until virtctl restart', async (t) => {
    const vm = scaledPool('restart', 1).spec.virtualMachineTemplate.spec;
    vm.template.spec.volumes = vm.template.spec.volumes?.filter((v) => v.name === 'containerdisk');
    vm.template.spec.domain.devices!.disks = vm.template.spec.domain.devices!.disks!.filter((d) => d.name === 'containerdisk');
    await ok(
      t,
      ['apply', '-n', NS, '-f', '-'],
      JSON.stringify({ apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', metadata: { name: 'restartvm' }, spec: vm }),
    );
    const first = await waitFor(ns.vmi('restartvm'), (v) => v.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: BOOT_DEADLINE_MS,
    });
    await ok(t, [
      'patch',
      '-n',
      NS,
      'vm',
      'restartvm',
      '--type=merge',
      '-p',
      '{"spec":{"template":{"spec":{"domain":{"resources":{"requests":{"memory":"160Mi"}}}}}}}',
    ]);
    const flagged = await waitFor(ns.vm('restartvm'), (v) => condition(v, 'RestartRequired') === 'True', { what: 'RestartRequired' });
    t.match(
      flagged.status?.conditions?.find((c) => c.type === 'RestartRequired'),
      { status: 'True', message: 'a non-live-updatable field was changed in the template spec' },
      "KubeVirt's condition on the VM, whose VMI runs on",
    );
    t.match(
      await virtctl(['restart', 'restartvm']),
      { code: 0, stdout: /VM restartvm was scheduled to restart/ },
      'virtctl restart accepted',
    );
    const next = await waitFor(ns.vmi('restartvm'), (v) => v.metadata.uid !== first.metadata.uid && v.status?.phase === 'Running', {
      what: 'the next VMI running',
      deadlineMs: BOOT_DEADLINE_MS,
    });
    const cleared = await waitFor(ns.vm('restartvm'), (v) => condition(v, 'RestartRequired') === undefined, {
      what: 'RestartRequired cleared',
    });
    t.same(
      { memory: next.spec.domain.resources?.requests?.memory, restartRequired: condition(cleared, 'RestartRequired') },
      { memory: '160Mi', restartRequired: undefined },
      'the restarted VM runs the changed template, and the condition is gone',
    );
  });
});
