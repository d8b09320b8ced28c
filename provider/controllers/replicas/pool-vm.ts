// The VMs a VirtualMachinePool makes (KubeVirt's pkg/virt-controller/watch/pool):
// named `<pool>-<index>` from the lowest unused index, each from the pool's
// template with its index appended to the Secret and ConfigMap names the
// pool's nameGeneration asks for, so every VM gets its own cloud-init; and
// the hash that says which template a VM (and through its template's labels,
// its VMI) was made from. Pure.
import { controllerRefTo } from '../../kubevirt/controller-ref.js';
import { createHash } from 'node:crypto';
import type { VirtualMachinePool } from '../../kubevirt/replica-types.js';
import { POOL_API_VERSION } from '../../kubevirt/replica-types.js';
import { KUBEVIRT_API_VERSION, type VirtualMachine, type VirtualMachineSpec } from '../../kubevirt/types.js';
import { sortedJson } from '../vm-sync.js';

/**
 * Label on a pool's VMs and their template (so on their VMIs): the hash of
 * the pool template they were made from. KubeVirt's pool keeps each spec in
 * a ControllerRevision and labels the VM with its name
 * (kubevirt.io/vmpool-revision-name); a content hash needs no revision
 * objects to store, compare or prune, and equal templates hash equal.
 */
export const POOL_TEMPLATE_LABEL = 'vkvm.io/vmpool-template-hash';

/** What makes a pool's VMs: its template and how names are indexed. */
export function poolTemplateHash(pool: VirtualMachinePool): string {
  const { virtualMachineTemplate, nameGeneration } = pool.spec;
  return createHash('sha256').update(sortedJson({ virtualMachineTemplate, nameGeneration })).digest('hex').slice(0, 16);
}

/** `<pool>-<index>`. */
export const poolVmName = (pool: string, index: number): string => `${pool}-${index}`;

/** The index in a pool VM's name (its last dash-separated part), or undefined. */
export function indexOfName(name: string): number | undefined {
  const last = name.slice(name.lastIndexOf('-') + 1);
  return /^\d+$/.test(last) ? Number(last) : undefined;
}

/** `count` names from the lowest index no VM of the namespace has (KubeVirt's calculateNewVMNames). */
export function newVmNames(pool: string, count: number, taken: ReadonlySet<string>): string[] {
  const names: string[] = [];
  for (let i = 0; names.length < count; i++) if (!taken.has(poolVmName(pool, i))) names.push(poolVmName(pool, i));
  return names;
}

/** The template's VM spec for index `idx` (KubeVirt's indexVMSpec, with 1.8's cloud-init secret refs). */
export function indexedVmSpec(pool: VirtualMachinePool, idx: number): VirtualMachineSpec {
  const spec = structuredClone(pool.spec.virtualMachineTemplate.spec);
  const secrets = pool.spec.nameGeneration?.appendIndexToSecretRefs === true;
  const configMaps = pool.spec.nameGeneration?.appendIndexToConfigMapRefs === true;
  const suffix = `-${idx}`;
  for (const volume of spec.template.spec.volumes ?? []) {
    // Kinds vkvm's VMs refuse (secret, configMap volumes) are indexed too: the VM names them in its refusal.
    const untyped = volume as { secret?: { secretName?: string }; configMap?: { name?: string } };
    if (configMaps && untyped.configMap?.name) untyped.configMap.name += suffix;
    else if (secrets && untyped.secret?.secretName) untyped.secret.secretName += suffix;
    else if (secrets && volume.cloudInitNoCloud) {
      if (volume.cloudInitNoCloud.secretRef) volume.cloudInitNoCloud.secretRef.name += suffix;
      if (volume.cloudInitNoCloud.networkDataSecretRef) volume.cloudInitNoCloud.networkDataSecretRef.name += suffix;
    }
  }
  return spec;
}

/** The parts of a pool VM the pool decides: labels, annotations and spec (KubeVirt's scaleOut and opportunisticUpdate). */
export function poolVmContent(
  pool: VirtualMachinePool,
  idx: number,
): Pick<VirtualMachine, 'spec'> & {
  labels: Record<string, string>;
  annotations: Record<string, string>;
} {
  const hash = poolTemplateHash(pool);
  const meta = pool.spec.virtualMachineTemplate.metadata ?? {};
  const spec = indexedVmSpec(pool, idx);
  spec.template.metadata = {
    ...(spec.template.metadata ?? {}),
    labels: { ...(spec.template.metadata?.labels ?? {}), [POOL_TEMPLATE_LABEL]: hash },
  };
  return { labels: { ...(meta.labels ?? {}), [POOL_TEMPLATE_LABEL]: hash }, annotations: { ...(meta.annotations ?? {}) }, spec };
}

/** The pool's VM of index `idx`, controlled by the pool. */
export function vmForPool(pool: VirtualMachinePool, idx: number): VirtualMachine {
  const { labels, annotations, spec } = poolVmContent(pool, idx);
  return {
    apiVersion: KUBEVIRT_API_VERSION,
    kind: 'VirtualMachine',
    metadata: {
      name: poolVmName(pool.metadata.name!, idx),
      namespace: pool.metadata.namespace ?? 'default',
      labels,
      ...(Object.keys(annotations).length ? { annotations } : {}),
      ownerReferences: [controllerRefTo(pool, POOL_API_VERSION, 'VirtualMachinePool')],
    },
    spec,
  };
}
