// The virt-launcher pod of a VMI, as KubeVirt's virt-controller renders it
// (pkg/virt-controller/services/template.go) in the parts the scheduler and
// vkvm read: it reserves the node's resources for the VM, puts the VMI on a
// node that runs VMs, and is owned by the VMI so the garbage collector
// removes it with the VMI. vkvm's node agent realizes the VM from the VMI,
// so the container's image is informational. Pure.
import { volumeClaimName } from '../kubevirt/volume-claim.js';
import { createHash } from 'node:crypto';
import type { V1LocalObjectReference, V1Node, V1Pod, V1Toleration, V1Volume } from '@kubernetes/client-node';
import { memoryLimitMiB } from '../../launcher/agent-api.js';
import type { Accelerator } from '../../vmm/probe/virtualization.js';
import { parseQuantity } from '../kube/quantity.js';
import { VIRTUALIZATION_LABEL } from '../node/status.js';
import { isMigrationTarget } from '../pods/migration-target.js';
import { KUBEVIRT_API_VERSION, type VirtualMachineInstance } from '../kubevirt/types.js';

export const LAUNCHER_APP_LABEL = 'kubevirt.io';
export const LAUNCHER_APP = 'virt-launcher';
export const CREATED_BY_LABEL = 'kubevirt.io/created-by';
export const VMI_NAME_LABEL = 'vm.kubevirt.io/name';
/** KubeVirt's stable launcher-pod label (v1.7 on), which newer `virtctl expose` selects. */
export const VMI_ID_LABEL = 'vmi.kubevirt.io/id';
export const DOMAIN_ANNOTATION = 'kubevirt.io/domain';
/** The label selector of every launcher pod. */
export const LAUNCHER_SELECTOR = `${LAUNCHER_APP_LABEL}=${LAUNCHER_APP}`;
export const SCHEDULABLE_LABEL = 'kubevirt.io/schedulable';
export const PROVIDER_TOLERATION: V1Toleration = { key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' };
/** The container image when the VMI boots no containerDisk. */
export const DEFAULT_LAUNCHER_IMAGE = 'vkvm/vmi';
export const DEFAULT_CPU_REQUEST = '100m';
export const DEFAULT_TERMINATION_GRACE_PERIOD_S = 30;

const MIB = 2 ** 20;

/**
 * Guest memory and vCPUs as translate.ts reads them: memory.guest, else
 * requests.memory, else limits.memory; vCPUs from domain.cpu's topology, else
 * ceil(limits.cpu, else requests.cpu, else 1). Unparseable values count as
 * absent here; the node agent reports them on the VMI.
 */
export function vmiCompute(vmi: VirtualMachineInstance): { memoryMiB: number; vcpus: number } {
  const domain = vmi.spec.domain ?? {};
  const q = (v: unknown): number | undefined => (v == null || v === '' ? undefined : (parseQuantity(String(v)) ?? undefined));
  const requests = domain.resources?.requests ?? {};
  const limits = domain.resources?.limits ?? {};
  const bytes = q(domain.memory?.guest) ?? q(requests.memory) ?? q(limits.memory) ?? 0;
  const c = domain.cpu ?? {};
  const vcpus =
    c.cores || c.sockets || c.threads
      ? (c.sockets || 1) * (c.cores || 1) * (c.threads || 1)
      : Math.max(1, Math.ceil(q(limits.cpu) ?? q(requests.cpu) ?? 1));
  return { memoryMiB: Math.ceil(bytes / MIB), vcpus };
}

/**
 * The pod's memory request: the guest's memory plus what the launcher's
 * cgroup allows on top of it (launcher/limits.ts) for the accelerator.
 */
export function launcherMemoryRequestMiB(vmi: VirtualMachineInstance, accelerator: Accelerator): number {
  const { memoryMiB, vcpus } = vmiCompute(vmi);
  const vnc = vmi.spec.domain?.devices?.autoattachGraphicsDevice !== false;
  return memoryLimitMiB({ memoryMiB, cpu: { sockets: vcpus, cores: 1, threads: 1 }, vnc }, accelerator);
}

/**
 * The accelerator to size the launcher pod for, before the scheduler picks a
 * node: TCG (which needs more memory per VM) when any schedulable node the
 * VMI's nodeSelector allows runs VMs under TCG (its vkvm.io/virtualization
 * label), else KVM. An upper bound: on a cluster mixing both, a VM that lands
 * on a KVM node reserves TCG's extra memory. Affinity is not considered.
 */
export function launcherAccelerator(vmi: VirtualMachineInstance, nodes: readonly V1Node[]): Accelerator {
  const wanted = { ...(vmi.spec.nodeSelector ?? {}), [SCHEDULABLE_LABEL]: 'true' };
  const fits = (n: V1Node) => Object.entries(wanted).every(([k, v]) => n.metadata?.labels?.[k] === v);
  return nodes.some((n) => fits(n) && n.metadata?.labels?.[VIRTUALIZATION_LABEL] === 'tcg') ? 'tcg' : 'kvm';
}

/**
 * The launcher pod's ephemeral storage: the VMI's request plus the disks the
 * node gives the VM at full size (emptyDisk and DiskOrCreate hostDisk
 * capacities), so the scheduler charges them; the request never exceeds the
 * VMI's limit, which the pod carries, and a VMI whose disks exceed it is
 * refused by the node (provider/pods/ephemeral-storage.ts), naming the limit.
 */
export function launcherEphemeralStorage(vmi: VirtualMachineInstance): { request?: string; limit?: string } {
  const q = (v: unknown): number => (v == null || v === '' ? 0 : (parseQuantity(String(v)) ?? 0));
  const resources = vmi.spec.domain?.resources ?? {};
  const limitRaw = resources.limits?.['ephemeral-storage'];
  const disksBytes = (vmi.spec.volumes ?? []).reduce(
    (sum, v) => sum + q(v.emptyDisk?.capacity) + (v.hostDisk?.type === 'DiskOrCreate' ? q(v.hostDisk.capacity) : 0),
    0,
  );
  const wanted = q(resources.requests?.['ephemeral-storage']) + disksBytes;
  const requestBytes = limitRaw != null && limitRaw !== '' ? Math.min(wanted, q(limitRaw)) : wanted;
  return {
    ...(requestBytes > 0 ? { request: `${Math.ceil(requestBytes / MIB)}Mi` } : {}),
    ...(limitRaw != null && limitRaw !== '' ? { limit: String(limitRaw) } : {}),
  };
}

/** The first containerDisk image, or the default. */
export function launcherImage(vmi: VirtualMachineInstance): string {
  return vmi.spec.volumes?.find((v) => v.containerDisk?.image)?.containerDisk?.image ?? DEFAULT_LAUNCHER_IMAGE;
}

/**
 * The Secrets and claims the VMI reads, as pod volumes: the Node authorizer
 * lets a node read only what the pods bound to it reference, and the
 * scheduler places the pod where a claim's local volume is.
 */
export function launcherVolumes(vmi: VirtualMachineInstance): V1Volume[] {
  return (vmi.spec.volumes ?? []).flatMap((v): V1Volume[] => {
    const ci = v.cloudInitNoCloud;
    if (ci) {
      return [
        ...(ci.secretRef?.name ? [{ name: `${v.name}-userdata`, secret: { secretName: ci.secretRef.name } }] : []),
        ...(ci.networkDataSecretRef?.name ? [{ name: `${v.name}-networkdata`, secret: { secretName: ci.networkDataSecretRef.name } }] : []),
      ];
    }
    const claimName = volumeClaimName(v);
    if (claimName)
      return [{ name: v.name, persistentVolumeClaim: { claimName, ...(v.persistentVolumeClaim?.readOnly ? { readOnly: true } : {}) } }];
    return [];
  });
}

/**
 * The import secrets of the VMI's claims (cdi.kubevirt.io/storage.import.secretName, from a DataVolume's
 * `spec.source.*.secretRef`), as secret volumes: the node imports into the claim itself (no importer pod),
 * and the Node authorizer lets it read only the Secrets its pods reference. The agent realizes no secret
 * volume of a launcher pod; these only grant the read.
 */
export function importSecretVolumes(importSecrets: readonly string[]): V1Volume[] {
  return [...new Set(importSecrets)].map((secretName, i) => ({ name: `import-secret-${i}`, secret: { secretName } }));
}

/**
 * The pull secrets of the VMI's images (containerDisk and kernelBoot
 * imagePullSecret), as KubeVirt puts them on its launcher pod: the node reads
 * a pod's pull secrets through them (the Node authorizer allows no others).
 */
export function launcherPullSecrets(vmi: VirtualMachineInstance): V1LocalObjectReference[] {
  const names = [
    ...(vmi.spec.volumes ?? []).map((v) => v.containerDisk?.imagePullSecret),
    vmi.spec.domain?.firmware?.kernelBoot?.container?.imagePullSecret,
  ];
  return [...new Set(names.filter((n): n is string => Boolean(n)))].map((name) => ({ name }));
}

/**
 * The VMI_ID_LABEL value, as KubeVirt computes it: the VMI's name, or for a
 * name longer than a label value may be (63), its first 54 characters, "-",
 * and the first 8 hex digits of the name's SHA-1.
 */
export function vmiIdOf(name: string): string {
  if (name.length <= 63) return name;
  return `${name.slice(0, 54)}-${createHash('sha1').update(name).digest('hex').slice(0, 8)}`;
}

/**
 * The launcher pod's labels, as KubeVirt's template service writes them: the
 * VMI's own, so a Service (or `virtctl expose vmi`) selecting them routes to
 * the VM, with the labels that mark the pod as this VMI's launcher written
 * over any the VMI carries. Like KubeVirt, only at creation: KubeVirt syncs
 * just a few node-related labels later, none of which vkvm sets.
 */
export function launcherLabels(vmi: VirtualMachineInstance): Record<string, string> {
  return {
    ...(vmi.metadata.labels ?? {}),
    [LAUNCHER_APP_LABEL]: LAUNCHER_APP,
    [CREATED_BY_LABEL]: vmi.metadata.uid!,
    [VMI_NAME_LABEL]: vmi.metadata.name!,
    [VMI_ID_LABEL]: vmiIdOf(vmi.metadata.name!),
  };
}

/**
 * The launcher pod for a VMI; the API server completes `virt-launcher-<vmi>-` with 5 random lowercase
 * alphanumerics. `importSecrets`: the import secrets its claims name (importSecretVolumes).
 */
export function launcherPodFor(vmi: VirtualMachineInstance, accelerator: Accelerator, importSecrets: readonly string[] = []): V1Pod {
  const name = vmi.metadata.name!;
  const uid = vmi.metadata.uid!;
  const spec = vmi.spec;
  const cpuRequest = spec.domain?.resources?.requests?.cpu;
  const volumes = [...launcherVolumes(vmi), ...importSecretVolumes(importSecrets)];
  const pullSecrets = launcherPullSecrets(vmi);
  const storage = launcherEphemeralStorage(vmi);
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: `virt-launcher-${name}-`,
      namespace: vmi.metadata.namespace ?? 'default',
      labels: launcherLabels(vmi),
      annotations: { [DOMAIN_ANNOTATION]: name },
      ownerReferences: [
        { apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance', name, uid, controller: true, blockOwnerDeletion: true },
      ],
    },
    spec: {
      nodeSelector: { ...(spec.nodeSelector ?? {}), [SCHEDULABLE_LABEL]: 'true' },
      ...(spec.affinity ? { affinity: structuredClone(spec.affinity) } : {}),
      tolerations: [...structuredClone(spec.tolerations ?? []), PROVIDER_TOLERATION],
      terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds ?? DEFAULT_TERMINATION_GRACE_PERIOD_S,
      // The guest's resolver is the pod's, as KubeVirt copies them (the node hands it on by DHCP).
      ...(spec.dnsPolicy ? { dnsPolicy: spec.dnsPolicy } : {}),
      ...(spec.dnsConfig ? { dnsConfig: structuredClone(spec.dnsConfig) } : {}),
      restartPolicy: 'Never',
      ...(volumes.length ? { volumes } : {}),
      ...(pullSecrets.length ? { imagePullSecrets: pullSecrets } : {}),
      containers: [
        {
          name: 'compute',
          image: launcherImage(vmi),
          resources: {
            requests: {
              memory: `${launcherMemoryRequestMiB(vmi, accelerator)}Mi`,
              cpu: cpuRequest != null ? String(cpuRequest) : DEFAULT_CPU_REQUEST,
              ...(storage.request ? { 'ephemeral-storage': storage.request } : {}),
            },
            ...(storage.limit ? { limits: { 'ephemeral-storage': storage.limit } } : {}),
          },
        },
      ],
    },
  };
}

/**
 * The VMI's launcher pod among `pods`: created by its UID, preferring the one
 * on the VMI's node, then one not being deleted, then the newest. A live
 * migration's target pod (migration-target.ts) is the VMI's pod only once the
 * VMI runs on its node (docs/design/live-migration.md §10 risk 6).
 */
export function launcherPodOf(vmi: VirtualMachineInstance, pods: readonly V1Pod[]): V1Pod | undefined {
  const node = vmi.status?.nodeName;
  const mine = pods.filter(
    (p) =>
      p.metadata?.labels?.[CREATED_BY_LABEL] === vmi.metadata.uid &&
      p.metadata?.namespace === vmi.metadata.namespace &&
      (!isMigrationTarget(p) || (node !== undefined && node !== '' && p.spec?.nodeName === node)),
  );
  const rank = (p: V1Pod) =>
    [
      node && p.spec?.nodeName === node ? 1 : 0,
      p.metadata?.deletionTimestamp ? 0 : 1,
      new Date(p.metadata?.creationTimestamp ?? 0).getTime(),
    ] as const;
  return mine.sort((a, b) => rank(b)[0] - rank(a)[0] || rank(b)[1] - rank(a)[1] || rank(b)[2] - rank(a)[2])[0];
}
