// The node side of KubeVirt compatibility, as virt-handler does it: a
// launcher pod owned by a VirtualMachineInstance is realized from the VMI's
// spec (through the same pod path as plain pods), and the VMI's Running /
// Succeeded / Failed phase, nodeName and conditions come from this node. The
// cluster side (VM → VMI → launcher pod, phases up to Scheduled) is in
// vm-controller.ts and vmi-controller.ts.
//
// The node watches the VMIs whose status.nodeName is this node (a CRD
// selectable field), so a change to a VMI, such as its paused annotation,
// resyncs its launcher pod.
import type { V1ObjectReference, V1OwnerReference, V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { mergePatch } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import { objectReference } from '../kube/events.js';
import { ClusterInformer } from '../kube/informer.js';
import type { Logger } from '../log.js';
import type { BuiltinImages } from '../vm-identity.js';
import type { VmObservation } from './status.js';
import type { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';
import { CRDS_MISSING_HINT, KubevirtApi, watchPath } from '../kubevirt/client.js';
import { NODE_VMI_STATUS_FIELDS, nodeVmiStatus, type NodeVmiStatusInput } from './vmi-status.js';
import type { VmAttachment } from '../network/pod-network.js';
import { statusPatch } from '../kube/status-patch.js';
import { DEFAULT_IMAGE_ALIASES, translateVmi, vmiReferences, type BoundClaim, type VmiTranslation } from '../kubevirt/translate.js';
import { GROUP, KUBEVIRT_API_VERSION, PAUSED_ANNOTATION, VERSION, VMI_PLURAL, type VirtualMachineInstance } from '../kubevirt/types.js';


/** The VMI a launcher pod belongs to, by its controller owner reference. */
export function vmiOwner(pod: V1Pod): V1OwnerReference | undefined {
  return pod.metadata?.ownerReferences?.find((r) => r.kind === 'VirtualMachineInstance' && r.apiVersion.startsWith(`${GROUP}/`) && r.controller);
}

/** The reference events about a launcher pod's VMI need, from the pod's owner reference. */
export function vmiReferenceOf(pod: V1Pod): V1ObjectReference | undefined {
  const owner = vmiOwner(pod);
  return owner ? { apiVersion: owner.apiVersion, kind: owner.kind, name: owner.name, uid: owner.uid, namespace: pod.metadata?.namespace ?? 'default' } : undefined;
}

export interface VmiSpecResult {
  spec: VmSpec;
  /** KubeVirt fields present in the VMI that vkvm does not realize. */
  unsupported: string[];
  /** The VMI asks for its vCPUs paused (PAUSED_ANNOTATION). */
  paused: boolean;
  /** The VMI, for events about it. */
  vmi: V1ObjectReference;
  /** Causes found later (by disk preparation) at the VMI's fields. */
  atKubevirtFields: VmiTranslation['atKubevirtFields'];
}

export class VmiNodeSide {
  private informer: ClusterInformer<VirtualMachineInstance> | undefined;

  constructor(
    private readonly clients: KubeClients,
    private readonly nodeName: string,
    private readonly builtins: (names: string[]) => Promise<BuiltinImages>,
    private readonly log: Logger,
  ) {}

  /**
   * Calls `onChange` with every change to a VMI on this node. Not awaited by
   * the caller: a cluster without the KubeVirt CRDs runs plain pods, and this
   * watch keeps retrying until they exist.
   */
  watch(onChange: (vmi: VirtualMachineInstance) => void): void {
    const kubevirt = new KubevirtApi(this.clients);
    const fieldSelector = `status.nodeName=${this.nodeName}`;
    this.informer = new ClusterInformer({ clients: this.clients, path: watchPath(VMI_PLURAL), list: () => kubevirt.listVmis({ fieldSelector }), fieldSelector, missingHint: CRDS_MISSING_HINT, log: this.log });
    this.informer.onChange(onChange);
    void this.informer.start();
  }

  async stop(): Promise<void> {
    await this.informer?.stop();
  }

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
    // The launcher, its directory and its domain are keyed by the pod, as for every pod on the node.
    return {
      spec: { ...result.spec, uid: pod.metadata!.uid! },
      unsupported: result.unsupported,
      paused: vmi.metadata.annotations?.[PAUSED_ANNOTATION] === 'true',
      vmi: objectReference({ ...vmi, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance' }),
      atKubevirtFields: result.atKubevirtFields,
    };
  }

  /**
   * Writes what this node knows into the VMI status (node-status.ts), only
   * the fields that changed. Earlier phases belong to the cluster controller
   * and are left alone.
   */
  async syncStatus(
    pod: V1Pod,
    vm: VmObservation | undefined,
    trouble: Pick<NodeVmiStatusInput, 'invalid' | 'imageError'>,
    unsupported: string[],
    attachment?: VmAttachment,
  ): Promise<void> {
    const vmi = await this.readVmi(pod);
    if (!vmi) return;
    // Whole seconds, as Kubernetes writes times.
    const now = new Date(Math.floor(Date.now() / 1000) * 1000);
    const next = nodeVmiStatus({ current: vmi.status ?? {}, nodeName: pod.spec?.nodeName ?? '', ...(vm ? { vm } : {}), ...trouble, ...(attachment ? { attachment } : {}), unsupported, now });
    const patch = statusPatch(vmi.status, next, NODE_VMI_STATUS_FIELDS);
    if (!patch) return;
    // The uid in the patch is a precondition: never write onto a newer VMI of the same name.
    await this.clients.custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: vmi.metadata.namespace!, plural: VMI_PLURAL, name: vmi.metadata.name!, body: { metadata: { uid: vmi.metadata.uid }, status: patch } },
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
        plural: VMI_PLURAL,
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
