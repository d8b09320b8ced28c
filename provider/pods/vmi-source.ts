// The node side of KubeVirt compatibility, as virt-handler does it: a
// launcher pod owned by a VirtualMachineInstance is realized from the VMI's
// spec (through the same pod path as plain pods). This module reads VMIs:
// their spec, with the secrets and claims it names; the VMI status this node
// owns is written by status-writer.ts. The cluster side (VM → VMI → launcher
// pod, phases up to Scheduled) is in controllers/.
//
// The node reads only the VMIs of the launcher pods bound to it, each by
// name: the VMI controller grants each VMI to its node alone
// (controllers/node-vmi-grant.ts), and no node may list VMIs across the
// cluster. Each of them is watched (a list/watch field-selected to its name),
// so a change to a VMI, such as its paused annotation, resyncs its launcher
// pod.
import type { V1ObjectReference, V1OwnerReference, V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import { objectReference } from '../kube/events.js';
import { ClusterInformer } from '../kube/informer.js';
import type { Logger } from '../log.js';
import type { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';
import { CRDS_MISSING_HINT, KubevirtApi, watchPath } from '../kubevirt/client.js';
import { claimOnNode } from '../kubevirt/claims.js';
import { diskPath, type CsiVolume } from '../csi-node/volume.js';
import { readOnlyField, type ClaimDisk } from '../csi-node/import-plan.js';
import { parseQuantity } from '../kube/quantity.js';
import { probesOf, type VmProbes } from './probes/probe-spec.js';
import { translateVmi, vmiReferences, type BoundClaim, type UnservableClaim, type VmiTranslation } from '../kubevirt/translate.js';
import { GROUP, KUBEVIRT_API_VERSION, PAUSED_ANNOTATION, VERSION, VMI_PLURAL, type VirtualMachineInstance } from '../kubevirt/types.js';
import { undersizedLauncherPod } from './launcher-pod-size.js';

/** The VMI a launcher pod belongs to, by its controller owner reference. */
export function vmiOwner(pod: V1Pod): V1OwnerReference | undefined {
  return pod.metadata?.ownerReferences?.find(
    (r) => r.kind === 'VirtualMachineInstance' && r.apiVersion.startsWith(`${GROUP}/`) && r.controller,
  );
}

/** The reference events about a launcher pod's VMI need, from the pod's owner reference. */
export function vmiReferenceOf(pod: V1Pod): V1ObjectReference | undefined {
  const owner = vmiOwner(pod);
  return owner
    ? { apiVersion: owner.apiVersion, kind: owner.kind, name: owner.name, uid: owner.uid, namespace: pod.metadata?.namespace ?? 'default' }
    : undefined;
}

export interface VmiSpecResult {
  spec: VmSpec;
  /** KubeVirt fields present in the VMI that vkvm does not realize. */
  unsupported: string[];
  /** The VMI asks for its vCPUs paused (PAUSED_ANNOTATION). */
  paused: boolean;
  /** The VMI, for events about it. */
  ref: V1ObjectReference;
  /** Causes found later (by disk preparation) at the VMI's fields. */
  atKubevirtFields: VmiTranslation['atKubevirtFields'];
  /** The VMI's probes, which the node runs (probes/prober.ts). */
  probes?: VmProbes;
  /** The CSI volumes of its claims, which the node stages and publishes before the VM starts (provider/csi-node/). */
  csiVolumes: CsiVolume[];
  /** The claims on those volumes, where a DataVolume's import writes (csi-node/volume-import.ts). */
  csiClaims?: ClaimDisk[];
}

/** The VMIs of this node's launcher pods, as the pod controller and the status writer read them. */
export interface VmiSource {
  /** Calls `handler` with every change to a followed VMI. */
  onChange(handler: (vmi: VirtualMachineInstance) => void): void;
  /** Watches the VMIs of these launcher pods (the node's own) and no others. */
  follow(pods: readonly V1Pod[]): void;
  stop(): Promise<void>;
  /** The VmSpec for a launcher pod, from its VMI; 'gone' when the VMI no longer exists (the pod will be collected). */
  specFor(pod: V1Pod): Promise<VmiSpecResult | SpecError | 'gone'>;
  /** A launcher pod's VMI, read from the API server; undefined when it is gone or was replaced. */
  read(pod: V1Pod): Promise<VirtualMachineInstance | undefined>;
}

export class ClusterVmiSource implements VmiSource {
  private readonly kubevirt: KubevirtApi;
  /** One watch per followed VMI, by its uid. */
  private readonly watches = new Map<string, ClusterInformer<VirtualMachineInstance>>();
  private handler: ((vmi: VirtualMachineInstance) => void) | undefined;
  private stopped = false;

  /** `csiRoot`: the agent's state directory, under which CSI volumes are published for pods (csi-node/volume.ts). */
  constructor(
    private readonly clients: KubeClients,
    private readonly log: Logger,
    private readonly csiRoot: string,
  ) {
    this.kubevirt = new KubevirtApi(clients);
  }

  /** Calls `handler` with every change to a followed VMI. */
  onChange(handler: (vmi: VirtualMachineInstance) => void): void {
    this.handler = handler;
  }

  /**
   * Watches the VMIs of these launcher pods (the node's own) and no others.
   * A watch keeps retrying while its VMI is not granted to this node yet, or
   * the cluster has no KubeVirt CRDs.
   */
  follow(pods: readonly V1Pod[]): void {
    if (this.stopped) return;
    const wanted = new Map<string, { namespace: string; name: string }>();
    for (const pod of pods) {
      const owner = vmiOwner(pod);
      if (owner) wanted.set(owner.uid, { namespace: pod.metadata?.namespace ?? 'default', name: owner.name });
    }
    for (const [uid, informer] of this.watches) {
      if (wanted.has(uid)) continue;
      this.watches.delete(uid);
      void informer.stop();
    }
    for (const [uid, { namespace, name }] of wanted) {
      if (this.watches.has(uid)) continue;
      const informer = new ClusterInformer<VirtualMachineInstance>({
        clients: this.clients,
        path: watchPath(VMI_PLURAL, namespace),
        list: () => this.kubevirt.listVmiNamed(namespace, name),
        fieldSelector: `metadata.name=${name}`,
        missingHint: CRDS_MISSING_HINT,
        log: this.log.child({ vmi: `${namespace}/${name}` }),
      });
      informer.onChange((vmi) => this.handler?.(vmi));
      this.watches.set(uid, informer);
      void informer.start();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.watches.values()].map((w) => w.stop()));
    this.watches.clear();
  }

  async specFor(pod: V1Pod): Promise<VmiSpecResult | SpecError | 'gone'> {
    const vmi = await this.read(pod);
    if (!vmi) return 'gone';
    // Before anything the VMI names (its secrets, its claims) is read for a pod not charged for it.
    const undersized = undersizedLauncherPod(pod, vmi);
    if (undersized) return undersized;
    const refs = vmiReferences(vmi);
    const namespace = vmi.metadata.namespace ?? 'default';
    const podUid = pod.metadata!.uid!;
    const pvcs = Object.fromEntries(
      await Promise.all(refs.claims.map(async (name) => [name, await this.resolveClaim(namespace, name, podUid)] as const)),
    );
    const result = translateVmi(vmi, {
      secrets: Object.fromEntries(
        await Promise.all(refs.secrets.map(async (name) => [name, await this.readSecret(namespace, name)] as const)),
      ),
      pvcs,
    });
    if ('causes' in result) return result;
    // The launcher, its directory and its domain are keyed by the pod, as for every pod on the node.
    return {
      spec: { ...result.spec, uid: pod.metadata!.uid! },
      unsupported: result.unsupported,
      paused: vmi.metadata.annotations?.[PAUSED_ANNOTATION] === 'true',
      ref: objectReference({ ...vmi, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance' }),
      atKubevirtFields: result.atKubevirtFields,
      probes: probesOf(undefined, vmi.spec),
      csiVolumes: Object.values(pvcs).flatMap((c) => ('kind' in c && c.kind === 'csi' ? [c.volume] : [])),
      csiClaims: Object.entries(pvcs).flatMap(([claim, c]) => ('kind' in c && c.kind === 'csi' ? [claimDisk(vmi, claim, c)] : [])),
    };
  }

  async read(pod: V1Pod): Promise<VirtualMachineInstance | undefined> {
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

  /**
   * A bound claim: where its data lives on this node, or why the node cannot
   * serve it (a refusal naming the claim's field). An unbound claim is
   * retried: the scheduler binds the launcher pod, which carries the claim,
   * only once it is bound, so the node rarely sees one.
   */
  private async resolveClaim(namespace: string, name: string, podUid: string): Promise<BoundClaim | UnservableClaim> {
    const pvc = await this.clients.core.readNamespacedPersistentVolumeClaim({ name, namespace });
    const pvName = pvc.spec?.volumeName;
    if (!pvName || pvc.status?.phase !== 'Bound') throw new Error(`PersistentVolumeClaim ${namespace}/${name} is not bound yet`);
    const pv = await this.clients.core.readPersistentVolume({ name: pvName });
    return claimOnNode(pvc, pv, (v) => diskPath(this.csiRoot, podUid, v));
  }
}

function claimDisk(vmi: VirtualMachineInstance, claim: string, c: Extract<BoundClaim, { kind: 'csi' }>): ClaimDisk {
  const capacityBytes = c.capacity === undefined ? null : parseQuantity(String(c.capacity));
  const readOnlyVolume = (vmi.spec?.volumes ?? []).findIndex(
    (v) => v.persistentVolumeClaim?.claimName === claim && v.persistentVolumeClaim.readOnly === true,
  );
  const readOnly = readOnlyField({
    claim,
    pvName: c.volume.pvName,
    ...(readOnlyVolume >= 0 ? { readOnlyVolume } : {}),
    pvReadOnly: c.volume.readOnly,
    accessMode: c.volume.accessMode,
  });
  return {
    namespace: vmi.metadata.namespace ?? 'default',
    claim,
    pvName: c.volume.pvName,
    diskPath: c.diskPath,
    volumeMode: c.volume.volumeMode,
    ...(capacityBytes !== null ? { capacityBytes } : {}),
    ...(readOnly ? { readOnly } : {}),
    ...(c.volume.accessMode.startsWith('MULTI_NODE') ? { multiNode: true } : {}),
  };
}
