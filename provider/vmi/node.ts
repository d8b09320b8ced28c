// The node side of KubeVirt compatibility, as virt-handler does it: a
// launcher pod owned by a VirtualMachineInstance is realized from the VMI's
// spec (through the same pod path as plain pods), and the VMI's Running /
// Succeeded / Failed phase, nodeName and conditions come from this node. The
// cluster side (VM → VMI → launcher pod, phases up to Scheduled) is in
// vm-controller.ts and vmi-controller.ts.
import { open } from 'node:fs/promises';
import type { V1OwnerReference, V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { mergePatch } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { BuiltinImages } from '../pods/translate.js';
import type { VmObservation } from '../pods/status.js';
import type { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';
import type { VmAttachment } from '../network/pod-network.js';
import { DEFAULT_IMAGE_ALIASES, translateVmi, vmiReferences, type BoundClaim } from './translate.js';
import type { Condition, VirtualMachineInstance, VirtualMachineInstanceStatus, VmiPhase } from './types.js';

const GROUP = 'kubevirt.io';
const VERSION = 'v1';
const PLURAL = 'virtualmachineinstances';

/** The VMI a launcher pod belongs to, by its controller owner reference. */
export function vmiOwner(pod: V1Pod): V1OwnerReference | undefined {
  return pod.metadata?.ownerReferences?.find((r) => r.kind === 'VirtualMachineInstance' && r.apiVersion.startsWith(`${GROUP}/`) && r.controller);
}

export interface VmiSpecResult {
  spec: VmSpec;
  /** KubeVirt fields present in the VMI that vkvm does not realize. */
  unsupported: string[];
}

export class VmiNodeSide {
  constructor(
    private readonly clients: KubeClients,
    private readonly builtins: (names: string[]) => Promise<BuiltinImages>,
  ) {}

  /** The VmSpec for a launcher pod, from its VMI; 'gone' when the VMI no longer exists (the pod will be collected). */
  async specFor(pod: V1Pod): Promise<VmiSpecResult | SpecError | 'gone'> {
    const vmi = await this.readVmi(pod);
    if (!vmi) return 'gone';
    const refs = vmiReferences(vmi, DEFAULT_IMAGE_ALIASES);
    const namespace = vmi.metadata.namespace ?? 'default';
    const result = translateVmi(vmi, {
      builtins: await this.builtins(refs.builtinImages),
      imageAliases: DEFAULT_IMAGE_ALIASES,
      secrets: Object.fromEntries(await Promise.all(refs.secrets.map(async (name) => [name, await this.readSecret(namespace, name)] as const))),
      pvcs: Object.fromEntries(await Promise.all(refs.claims.map(async (name) => [name, await this.resolveClaim(namespace, name)] as const))),
    });
    if ('causes' in result) return result;
    for (const img of result.diskImagesToCreate) await createSparseIfMissing(img.path, img.sizeMiB);
    // The launcher, its directory and its domain are keyed by the pod, as for every pod on the node.
    return { spec: { ...result.spec, uid: pod.metadata!.uid! }, unsupported: result.unsupported };
  }

  /**
   * Writes what this node knows into the VMI status: phase once the VM runs or
   * ended, nodeName, Ready/Paused conditions, and vkvm's UnsupportedFields
   * condition. Earlier phases belong to the cluster controller and are left alone.
   */
  async syncStatus(
    pod: V1Pod,
    vm: VmObservation | undefined,
    problem: { reason: string; message: string } | undefined,
    unsupported: string[],
    attachment?: VmAttachment,
  ): Promise<void> {
    const vmi = await this.readVmi(pod);
    if (!vmi) return;
    const status = vmi.status ?? {};
    const phase: VmiPhase | undefined = problem
      ? 'Failed'
      : vm?.phase === 'Running' || vm?.phase === 'Paused'
        ? 'Running'
        : vm?.phase === 'Succeeded' || vm?.phase === 'Failed'
          ? vm.phase
          : undefined;
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const conditions: Condition[] = [
      condition('Ready', vm?.phase === 'Running' && vm.guestReady, status.conditions, now, vm?.phase === 'Running' ? 'GuestNotReady' : 'NotRunning'),
      condition('Paused', vm?.phase === 'Paused', status.conditions, now, 'NotPaused'),
      ...(unsupported.length
        ? [{ ...condition('UnsupportedFields', true, status.conditions, now, ''), reason: 'Ignored', message: `vkvm does not realize: ${unsupported.join(', ')}` }]
        : []),
    ];
    const next: VirtualMachineInstanceStatus = {
      ...(phase ? { phase } : {}),
      nodeName: pod.spec?.nodeName ?? '',
      conditions: [...(status.conditions ?? []).filter((c) => !OWNED_CONDITIONS.has(c.type)), ...conditions],
      ...(problem ? { reason: problem.reason } : {}),
      // As KubeVirt reports it: the pod address, also for masquerade (whose guest holds a private one).
      ...(attachment
        ? { interfaces: [{ name: attachment.interfaceName, ipAddress: attachment.podIP, ipAddresses: [attachment.podIP], mac: attachment.mac, infoSource: 'domain' }] }
        : {}),
    };
    if (phase && phase !== status.phase) {
      next.phaseTransitionTimestamps = [...(status.phaseTransitionTimestamps ?? []), { phase, phaseTransitionTimestamp: now }];
    }
    if (sameFields(status, next)) return;
    await this.clients.custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: vmi.metadata.namespace!, plural: PLURAL, name: vmi.metadata.name!, body: { metadata: { uid: vmi.metadata.uid }, status: next } },
      mergePatch,
    );
  }

  private async readVmi(pod: V1Pod): Promise<VirtualMachineInstance | undefined> {
    const owner = vmiOwner(pod);
    if (!owner) return undefined;
    try {
      const vmi = (await this.clients.custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: pod.metadata!.namespace!,
        plural: PLURAL,
        name: owner.name,
      })) as VirtualMachineInstance;
      // A VMI of the same name but another UID is a different instance: this pod's is gone.
      return vmi.metadata.uid === owner.uid ? vmi : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  private async readSecret(namespace: string, name: string): Promise<Record<string, string>> {
    const secret = await this.clients.core.readNamespacedSecret({ name, namespace });
    return Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
  }

  /** A claim bound to a local or hostPath PersistentVolume: where its data lives on this node. */
  private async resolveClaim(namespace: string, name: string): Promise<BoundClaim> {
    const pvc = await this.clients.core.readNamespacedPersistentVolumeClaim({ name, namespace });
    const pvName = pvc.spec?.volumeName;
    if (!pvName || pvc.status?.phase !== 'Bound') throw new Error(`PersistentVolumeClaim ${namespace}/${name} is not bound yet`);
    const pv = await this.clients.core.readPersistentVolume({ name: pvName });
    const hostPath = pv.spec?.local?.path ?? pv.spec?.hostPath?.path;
    if (!hostPath) throw new Error(`PersistentVolume ${pvName} is neither local nor hostPath; vkvm cannot reach it from the node`);
    const capacity = pvc.status?.capacity?.storage;
    return { hostPath, volumeMode: pv.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem', ...(capacity ? { capacity } : {}) };
  }
}

/** Condition types this node writes; the rest (the controller's Synchronized, …) are kept as they are. */
const OWNED_CONDITIONS = new Set(['Ready', 'Paused', 'UnsupportedFields']);

function condition(type: string, ok: boolean, previous: Condition[] | undefined, now: string, falseReason: string): Condition {
  const status = ok ? 'True' : 'False';
  const prev = previous?.find((c) => c.type === type);
  return { type, status, lastTransitionTime: prev?.status === status && prev.lastTransitionTime ? prev.lastTransitionTime : now, ...(ok ? {} : { reason: falseReason }) };
}

/** Whether `next` changes nothing in `current` (times compared as written). */
function sameFields(current: VirtualMachineInstanceStatus, next: VirtualMachineInstanceStatus): boolean {
  const pick = (s: VirtualMachineInstanceStatus) =>
    JSON.stringify({ phase: s.phase, nodeName: s.nodeName, reason: s.reason, interfaces: s.interfaces, conditions: [...(s.conditions ?? [])].sort((a, b) => a.type.localeCompare(b.type)), ts: s.phaseTransitionTimestamps });
  return pick({ ...current, ...next }) === pick(current);
}

/** Creates a sparse raw image file of `sizeMiB` unless `path` exists. */
async function createSparseIfMissing(path: string, sizeMiB: number): Promise<void> {
  try {
    const file = await open(path, 'wx', 0o660);
    try {
      await file.truncate(sizeMiB * 2 ** 20);
    } finally {
      await file.close();
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}
