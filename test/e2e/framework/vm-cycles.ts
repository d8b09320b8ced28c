// Create/delete cycles of VMs for the leak audit (npm run bench -- leaks)
// and its CI e2e: plain pods and KubeVirt VMIs, bridged and masquerade,
// deleted gracefully or forced, once Running or in the middle of their start.
// A cycle ends when its objects are gone from the API; what the agent still
// has to tear down after a forced deletion it does on its own time, which is
// why the audit waits for the agent's VM directories to empty before it looks.
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../../provider/kube/client.js';
import { isNotFound } from '../../../provider/kube/errors.js';
import type { VirtualMachineInstance } from '../../../provider/kubevirt/types.js';
import { smokeVmiSpec, vmiOf } from './kubevirt.js';
import { testGuestPod, VKVM_TOLERATION } from './pods.js';
import { waitFor, waitForGone } from './wait.js';
import { pods, virtualMachineInstances } from './watched.js';

export interface CycleKind {
  workload: 'pod' | 'vmi';
  network: 'bridge' | 'masquerade';
  /** When and how it is deleted: once Running, or as soon as it is bound to the node; forced is grace 0. */
  deletion: 'running' | 'running-forced' | 'mid-start' | 'mid-start-forced';
}

/** The mix, taken in turn: every workload with every binding, and every deletion for each workload. */
export const CYCLE_MIX: readonly CycleKind[] = [
  { workload: 'pod', network: 'bridge', deletion: 'running' },
  { workload: 'pod', network: 'masquerade', deletion: 'running-forced' },
  { workload: 'vmi', network: 'masquerade', deletion: 'running' },
  { workload: 'pod', network: 'bridge', deletion: 'mid-start' },
  { workload: 'vmi', network: 'bridge', deletion: 'mid-start-forced' },
  { workload: 'pod', network: 'masquerade', deletion: 'mid-start-forced' },
  { workload: 'vmi', network: 'bridge', deletion: 'running-forced' },
  { workload: 'pod', network: 'bridge', deletion: 'running-forced' },
  { workload: 'vmi', network: 'masquerade', deletion: 'mid-start' },
  { workload: 'pod', network: 'masquerade', deletion: 'running' },
];

export interface CycleEnv {
  clients: KubeClients;
  namespace: string;
  /** The vkvm node the VMs run on. */
  node: string;
  /** How long a VM may take to be Running, and its objects to go. */
  deadlineMs?: number;
}

export interface CycleResult {
  name: string;
  kind: CycleKind;
  /** UIDs of the pods it made (a VMI's launcher pod). */
  podUids: string[];
}

/** Small and quick to stop: 128 MiB, 1 s to power off before it is destroyed. */
const GRACE_S = 1;

function cyclePod(name: string, kind: CycleKind, node: string): V1Pod {
  return testGuestPod({
    name,
    node,
    annotations: { 'vkvm.io/pod-network': kind.network },
    terminationGracePeriodSeconds: GRACE_S,
    resources: { requests: { cpu: '10m' }, limits: { memory: '128Mi' } },
    ...(kind.network === 'masquerade' ? { ports: [8080] } : {}),
  });
}

function cycleVmi(name: string, kind: CycleKind, node: string): VirtualMachineInstance {
  const spec = smokeVmiSpec();
  spec.domain.devices!.interfaces = [{ name: 'default', ...(kind.network === 'bridge' ? { bridge: {} } : { masquerade: {} }) }];
  spec.domain.resources = { requests: { memory: '128Mi', cpu: '10m' } };
  spec.terminationGracePeriodSeconds = GRACE_S;
  spec.nodeSelector = { 'kubernetes.io/hostname': node };
  spec.tolerations = [VKVM_TOLERATION];
  return vmiOf(name, spec);
}

const forced = (kind: CycleKind): boolean => kind.deletion.endsWith('forced');

/** One cycle: create, wait as the kind says, delete, wait until its objects are gone from the API. */
export async function runCycle(env: CycleEnv, name: string, kind: CycleKind): Promise<CycleResult> {
  const { clients, namespace } = env;
  const deadlineMs = env.deadlineMs ?? 300_000;
  const atRunning = kind.deletion.startsWith('running');
  const grace = forced(kind) ? { gracePeriodSeconds: 0 } : {};
  if (kind.workload === 'pod') {
    const created = await clients.core.createNamespacedPod({ namespace, body: cyclePod(name, kind, env.node) });
    await waitFor(pods(clients, namespace, { name }), (p) => (atRunning ? p.status?.phase === 'Running' : !!p.spec?.nodeName), {
      what: atRunning ? 'Running' : 'bound to the node',
      deadlineMs,
    });
    await clients.core.deleteNamespacedPod({ name, namespace, ...grace });
    await waitForGone(pods(clients, namespace, { name }), { what: 'deleted', deadlineMs });
    return { name, kind, podUids: [created.metadata!.uid!] };
  }
  const at = { group: 'kubevirt.io', version: 'v1', namespace, plural: 'virtualmachineinstances' };
  const created = (await clients.custom.createNamespacedCustomObject({
    ...at,
    body: cycleVmi(name, kind, env.node),
  })) as VirtualMachineInstance;
  const launcherPods = pods(clients, namespace, { labelSelector: `kubevirt.io/created-by=${created.metadata.uid}` });
  await waitFor(
    virtualMachineInstances(clients, namespace, { name }),
    (v) => (atRunning ? v.status?.phase === 'Running' : v.status?.phase === 'Scheduled' || v.status?.phase === 'Running'),
    { what: atRunning ? 'Running' : 'Scheduled', deadlineMs },
  );
  const launcher = await waitFor(launcherPods, () => true, { what: 'made for it', deadlineMs });
  await clients.custom.deleteNamespacedCustomObject({ ...at, name, ...grace });
  // A forced VMI deletion forces its launcher pod too, as `kubectl delete --force` of both would.
  if (forced(kind)) {
    await clients.core.deleteNamespacedPod({ name: launcher.metadata!.name!, namespace, gracePeriodSeconds: 0 }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
  }
  await waitForGone(virtualMachineInstances(clients, namespace, { name }), { what: 'deleted', deadlineMs });
  await waitForGone(launcherPods, { what: 'deleted with its VMI', deadlineMs });
  return { name, kind, podUids: [launcher.metadata!.uid!] };
}

/**
 * Runs `count` cycles of the mix, `concurrency` at a time, named
 * `<prefix>-<n>`; `onCycle` hears of each one that ended. Stops at the first
 * failure.
 */
export async function runCycles(
  env: CycleEnv,
  opts: { count: number; concurrency: number; prefix?: string; onCycle?: (r: CycleResult, done: number) => void },
): Promise<CycleResult[]> {
  const results: CycleResult[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < opts.count) {
      const i = next++;
      const r = await runCycle(env, `${opts.prefix ?? 'cycle'}-${i}`, CYCLE_MIX[i % CYCLE_MIX.length]!);
      results.push(r);
      opts.onCycle?.(r, results.length);
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, opts.count) }, worker));
  return results;
}
