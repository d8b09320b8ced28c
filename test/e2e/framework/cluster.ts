// The control plane of one e2e test file (deploy/cluster), and the namespace
// a file's objects live in, with the watches the tests wait on.
import { randomInt } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { KubeConfig, RbacAuthorizationV1Api, type CoreV1Event, type V1PersistentVolumeClaim, type V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import { freeClusterPorts, startCluster, type RunningCluster } from '../../../deploy/cluster/cluster.js';
import { loadKubeConfig, makeClients, type KubeClients } from '../../../provider/kube/client.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../../provider/kubevirt/types.js';
import { waitFor } from './wait.js';
import {
  eventsOf,
  persistentVolumeClaims,
  pods,
  serviceAccounts,
  virtualMachineInstances,
  virtualMachines,
  type Selection,
  type Watched,
} from './watched.js';

export const testLog = pino({ level: process.env.VKVM_TEST_LOG ?? 'warn' });

export interface TestCluster extends RunningCluster {
  clients: KubeClients;
  stateDir: string;
}

/** A fresh control plane for one test file, stopped and removed in teardown. */
export async function startTestCluster(
  t: Test,
  opts: { nodeMonitorGracePeriodS?: number; bindAddress?: string } = {},
): Promise<TestCluster> {
  const stateDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-cluster-'));
  const cluster = await startCluster({
    stateDir,
    ports: await freeClusterPorts(),
    // Clusters of concurrent test runs on one host must not hand out the same pod ranges.
    clusterCidr: `10.${100 + randomInt(150)}.0.0/16`,
    unsafeNoFsync: true,
    log: testLog,
    ...(opts.nodeMonitorGracePeriodS ? { nodeMonitorGracePeriodS: opts.nodeMonitorGracePeriodS } : {}),
    ...(opts.bindAddress ? { bindAddress: opts.bindAddress } : {}),
  });
  t.teardown(async () => {
    await cluster.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
  return { ...cluster, stateDir, clients: makeClients(loadKubeConfig(cluster.kubeconfigPath)) };
}

/**
 * Clients for the vkvm controllers under their own identity, bound as
 * deploy/rbac.yaml tells operators to: a ServiceAccount in kube-system with
 * the vkvm:controllers role and the leader-election Role, and a token for it.
 * So the shipped RBAC is what the approver and the VMI controllers run with.
 */
export async function controllersIdentity(cluster: TestCluster): Promise<KubeClients> {
  const name = 'vkvm-controllers';
  const namespace = 'kube-system';
  const admin = cluster.clients;
  const rbac = admin.kc.makeApiClient(RbacAuthorizationV1Api);
  const subjects = [{ kind: 'ServiceAccount', name, namespace }];
  await admin.core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: 'vkvm:controllers' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'vkvm:controllers' },
      subjects,
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: 'vkvm:controllers-leader-election' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'vkvm:controllers-leader-election' },
      subjects,
    },
  });
  const issued = await admin.core.createNamespacedServiceAccountToken({
    name,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const current = admin.kc.getCurrentCluster()!;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [current],
    users: [{ name, token: issued.status!.token }],
    contexts: [{ name, cluster: current.name, user: name }],
    currentContext: name,
  });
  return makeClients(kc);
}

/** A test file's namespace: its name, watches on what lives in it, and kubectl pointed at it. */
export interface TestNamespace {
  name: string;
  cluster: TestCluster;
  pod(name: string): Watched<V1Pod>;
  pods(sel?: Selection): Watched<V1Pod>;
  /** Events about one object, by its UID. */
  eventsOf(uid: string): Watched<CoreV1Event>;
  vm(name: string): Watched<VirtualMachine>;
  vmi(name: string): Watched<VirtualMachineInstance>;
  vmis(sel?: Selection): Watched<VirtualMachineInstance>;
  pvc(name: string): Watched<V1PersistentVolumeClaim>;
  /** Creates a pod in this namespace (whatever namespace its metadata names). */
  createPod(pod: V1Pod): Promise<V1Pod>;
  readPod(name: string): Promise<V1Pod>;
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number }): ReturnType<RunningCluster['kubectl']>;
}

/**
 * Creates a namespace and waits for its `default` ServiceAccount: until the
 * service account controller made it, a pod is refused ("serviceaccount
 * default not found"). The namespace is deleted in `t`'s teardown (without
 * waiting: the cluster goes with the test file).
 */
export async function testNamespace(t: Test, cluster: TestCluster, name: string): Promise<TestNamespace> {
  const { clients } = cluster;
  await clients.core.createNamespace({ body: { metadata: { name } } });
  t.teardown(() => clients.core.deleteNamespace({ name }).catch(() => undefined));
  await waitFor(serviceAccounts(clients, name, { name: 'default' }), () => true, { what: 'made by the service account controller' });
  return {
    name,
    cluster,
    pod: (pod) => pods(clients, name, { name: pod }),
    pods: (sel) => pods(clients, name, sel),
    eventsOf: (uid) => eventsOf(clients, name, uid),
    vm: (vm) => virtualMachines(clients, name, { name: vm }),
    vmi: (vmi) => virtualMachineInstances(clients, name, { name: vmi }),
    vmis: (sel) => virtualMachineInstances(clients, name, sel),
    pvc: (pvc) => persistentVolumeClaims(clients, name, { name: pvc }),
    createPod: (pod) =>
      clients.core.createNamespacedPod({ namespace: name, body: { ...pod, metadata: { ...pod.metadata, namespace: name } } }),
    readPod: (pod) => clients.core.readNamespacedPod({ name: pod, namespace: name }),
    kubectl: (args, opts) => cluster.kubectl(['-n', name, ...args], opts),
  };
}
