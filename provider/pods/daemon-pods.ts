// Which DaemonSet pods are VMs. Cluster add-ons (kube-proxy, CNI agents,
// node exporters) run as DaemonSets that tolerate every taint, so the
// DaemonSet controller binds them to vkvm nodes too; their images are
// containers, not disks. A DaemonSet pod is a VM only when its template says
// it is meant for vkvm nodes: it tolerates vkvm's taint by its key, or it
// selects vkvm nodes by their `type: virtual-kubelet` label (nodeSelector or
// a required node affinity term). Any other is refused at admission, as the
// kubelet refuses a pod it cannot run, before its image is pulled; the
// DaemonSet controller then backs off before it makes the pod again.
import type { V1NodeSelectorTerm, V1Pod } from '@kubernetes/client-node';
import { DEFAULT_TAINT } from '../config.js';

/** The label every vkvm Node carries (provider/node/). */
const NODE_TYPE = { key: 'type', value: 'virtual-kubelet' } as const;

export const NOT_A_VM_REASON = 'NotAVirtualMachine';

const selectsVkvm = (term: V1NodeSelectorTerm): boolean =>
  (term.matchExpressions ?? []).some((e) => e.key === NODE_TYPE.key && e.operator === 'In' && (e.values ?? []).includes(NODE_TYPE.value));

/** Why this node does not run `pod` as a VM, if it is a DaemonSet's pod that is not meant for vkvm nodes. */
export function daemonPodRefusal(pod: V1Pod): string | undefined {
  const owner = pod.metadata?.ownerReferences?.find((r) => r.controller && r.kind === 'DaemonSet');
  if (!owner) return undefined;
  const spec = pod.spec;
  if ((spec?.tolerations ?? []).some((t) => t.key === DEFAULT_TAINT.key)) return undefined;
  if (spec?.nodeSelector?.[NODE_TYPE.key] === NODE_TYPE.value) return undefined;
  if ((spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? []).some(selectsVkvm))
    return undefined;
  return (
    `Pod was rejected: a pod of DaemonSet ${owner.name} reaches this vkvm node only by tolerating every taint; ` +
    `vkvm runs a DaemonSet's pods as VMs only when they tolerate ${DEFAULT_TAINT.key} by key or select ${NODE_TYPE.key}=${NODE_TYPE.value} nodes`
  );
}
