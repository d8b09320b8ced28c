// The VMI controller (KubeVirt's virt-controller VMI loop, cluster side): each
// VirtualMachineInstance gets one virt-launcher pod, which the scheduler
// places on a vkvm node; the VMI's phase follows the pod up to Scheduled
// (vmi-phase.ts). From Running on, the node agent owns the VMI's status; this
// controller only fails a VMI whose pod terminated or vanished. Before its
// pod, a VMI gets the disks KubeVirt's admission would have given it
// (kubevirt/defaults.ts), written into its spec.
//
// One launcher pod per VMI: keys never sync concurrently, and before creating
// a pod the controller asks the API server (not the cache, which may lag its
// own last create) whether the VMI has one. Status writes are merge patches
// conditional on the resourceVersion read, so a phase the node agent wrote
// meanwhile is never overwritten. Pod creates are recorded as Events on the
// VMI, as KubeVirt words them. A VMI with a node is granted to that node for
// reading (node-vmi-grant.ts) before its status names the node.
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { objectReference, type EventRecorder } from '../kube/events.js';
import type { KubeClients } from '../kube/client.js';
import { apiMessage, isConflict, isNamespaceTerminating, isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { QueuedController } from './queued-controller.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../kube/informer.js';
import { WrittenVersions } from './written-versions.js';
import type { KubevirtApi } from '../kubevirt/client.js';
import { CREATED_BY_LABEL, launcherAccelerator, launcherPodFor, launcherPodOf, VMI_NAME_LABEL } from './launcher-pod.js';
import { statusPatch } from '../kube/status-patch.js';
import { disksWithDefaults } from '../kubevirt/defaults.js';
import { KUBEVIRT_API_VERSION, VMI_PLURAL, type Disk, type VirtualMachineInstance, type VmiPhase } from '../kubevirt/types.js';
import { volumeClaimName } from '../kubevirt/volume-claim.js';
import { IMPORT_SECRET_ANNOTATION } from '../kubevirt/datavolume-annotations.js';
import { needsLauncherPod, nextVmiStatus, VMI_STATUS_FIELDS } from './vmi-phase.js';
import type { NodeVmiGrants } from './node-vmi-grant.js';

export interface VmiControllerOptions {
  clients: KubeClients;
  kubevirt: KubevirtApi;
  vmis: ClusterInformer<VirtualMachineInstance>;
  /** Launcher pods (label kubevirt.io=virt-launcher) in every namespace. */
  pods: ClusterInformer<V1Pod>;
  /** Schedulable nodes (label kubevirt.io/schedulable=true): TCG nodes need bigger launcher pods. */
  nodes: ClusterInformer<V1Node>;
  /** Lets each VMI's node read it. */
  grants: NodeVmiGrants;
  events: EventRecorder;
  workers?: number;
  log: Logger;
  now?: () => Date;
}

/** Phases in which the VMI's pod matters to this controller (it creates one, or fails the VMI without one). */
const POD_PHASES: ReadonlySet<VmiPhase> = new Set(['', 'Pending', 'Scheduling', 'Scheduled']);

/** The VMI a launcher pod belongs to, as a key. */
export function vmiKeyOfPod(pod: V1Pod): string | undefined {
  const namespace = pod.metadata?.namespace ?? 'default';
  const owner = pod.metadata?.ownerReferences?.find((r) => r.controller && r.kind === 'VirtualMachineInstance');
  const name = owner?.name ?? pod.metadata?.labels?.[VMI_NAME_LABEL];
  return name ? objectKey(namespace, name) : undefined;
}

export class VmiController extends QueuedController {
  private readonly written = new WrittenVersions();
  private readonly now: () => Date;

  constructor(private readonly o: VmiControllerOptions) {
    super({ name: 'syncVmisFromKubernetes', workers: o.workers ?? 4, log: o.log });
    this.now = o.now ?? (() => new Date());
    o.vmis.onChange((vmi) => this.enqueue(keyOfObject(vmi)));
    o.pods.onChange((pod) => {
      const key = vmiKeyOfPod(pod);
      if (key) this.enqueue(key);
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncVmi(key);
  }

  protected ownedKeys(): string[] {
    return this.o.vmis.list().map(keyOfObject);
  }

  /** The import secrets the VMI's claims name (a claim not there yet names none: its import then says it may not read one). */
  private async importSecrets(vmi: VirtualMachineInstance): Promise<string[]> {
    const namespace = vmi.metadata.namespace ?? 'default';
    const names = (vmi.spec.volumes ?? []).map(volumeClaimName).filter((n): n is string => n !== undefined);
    const secrets = await Promise.all(
      names.map(async (name) => {
        try {
          const claim = await this.o.clients.core.readNamespacedPersistentVolumeClaim({ name, namespace });
          return claim.metadata?.annotations?.[IMPORT_SECRET_ANNOTATION];
        } catch (err) {
          if (isNotFound(err)) return undefined;
          throw err;
        }
      }),
    );
    return secrets.filter((s): s is string => Boolean(s));
  }

  /** The VMI's launcher pod as the API server has it now; used only when the cache shows none. */
  private async livePod(vmi: VirtualMachineInstance): Promise<V1Pod | undefined> {
    const namespace = vmi.metadata.namespace ?? 'default';
    const { items } = await this.o.clients.core.listNamespacedPod({ namespace, labelSelector: `${CREATED_BY_LABEL}=${vmi.metadata.uid}` });
    return launcherPodOf(vmi, items);
  }

  /** Ensures the VMI's launcher pod exists, then writes the VMI status if it changed. */
  async syncVmi(key: string): Promise<void> {
    const vmi = this.o.vmis.get(key);
    if (!vmi) this.o.grants.forget(key);
    if (!vmi || this.written.stale(key, vmi)) return;
    const log = this.o.log.child({ vmi: key, uid: vmi.metadata.uid });
    const phase = vmi.status?.phase ?? '';
    let pod = launcherPodOf(vmi, this.o.pods.list());
    if (!pod && POD_PHASES.has(phase) && !vmi.metadata.deletionTimestamp) pod = await this.livePod(vmi);

    let createError: string | undefined;
    let failure: unknown;
    // KubeVirt defaults a VMI at admission; vkvm, without a mutating webhook,
    // before the pod (sized and realized from the spec) exists. The write's
    // watch event syncs the VMI again, and that sync creates the pod.
    const defaultedDisks = needsLauncherPod(vmi, pod) ? disksWithDefaults(vmi.spec) : undefined;
    if (defaultedDisks) return this.writeDefaults(key, vmi, defaultedDisks, log);
    if (needsLauncherPod(vmi, pod)) {
      const ref = objectReference({ ...vmi, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance' });
      try {
        pod = await this.o.clients.core.createNamespacedPod({
          namespace: vmi.metadata.namespace ?? 'default',
          body: launcherPodFor(vmi, launcherAccelerator(vmi, this.o.nodes.list()), await this.importSecrets(vmi)),
        });
        log.info({ pod: pod.metadata?.name }, 'created the launcher pod');
        this.o.events.recordFor(ref, 'Normal', 'SuccessfulCreate', `Created virtual machine pod ${pod.metadata?.name}`);
      } catch (err) {
        createError = `failed to create the launcher pod: ${apiMessage(err)}`;
        // A namespace being deleted takes the VMI with it: no retry, and no Event (refused there too).
        if (isNamespaceTerminating(err)) log.info('the namespace is being deleted: no launcher pod is created');
        else {
          failure = err;
          this.o.events.recordFor(ref, 'Warning', 'FailedCreate', `Error creating pod: ${apiMessage(err)}`);
        }
      }
    }

    const now = this.now();
    const decision = nextVmiStatus({ vmi, ...(pod ? { pod } : {}), ...(createError ? { createError } : {}), now });
    const nodeName = decision.status.nodeName;
    if (nodeName && !vmi.metadata.deletionTimestamp) {
      // Until this exists the node cannot read the VMI; its status is still written, and the grant retried.
      await this.o.grants.ensure(key, vmi, nodeName).catch((err: unknown) => {
        failure ??= err;
        log.error({ err, nodeName }, "could not grant the VMI's node read access to it");
      });
    }
    const patch = statusPatch(vmi.status, decision.status, VMI_STATUS_FIELDS);
    if (patch) {
      try {
        const rv = await this.o.kubevirt.patchStatus(
          VMI_PLURAL,
          vmi.metadata.namespace ?? 'default',
          vmi.metadata.name!,
          vmi.metadata.resourceVersion,
          patch,
        );
        this.written.record(key, rv);
        if (patch.phase)
          log.info(
            { phase: decision.status.phase, reason: decision.status.reason, nodeName: decision.status.nodeName },
            'VMI phase changed',
          );
      } catch (err) {
        // Changed since the cache read it, maybe by the node agent (its watch event requeues the key), or deleted.
        if (!isConflict(err) && !isNotFound(err)) throw err;
        log.debug({ err }, 'VMI changed while syncing; the next sync will see it');
      }
    }
    if (failure) throw failure;
    if (decision.recheckAfterMs !== undefined) this.enqueueAfter(key, decision.recheckAfterMs + 100);
  }

  /** Writes KubeVirt's default disks into the VMI's spec, conditional on the version read. */
  private async writeDefaults(key: string, vmi: VirtualMachineInstance, disks: Disk[], log: Logger): Promise<void> {
    try {
      const rv = await this.o.kubevirt.patchSpec(
        VMI_PLURAL,
        vmi.metadata.namespace ?? 'default',
        vmi.metadata.name!,
        vmi.metadata.resourceVersion,
        {
          domain: { devices: { disks } },
        },
      );
      this.written.record(key, rv);
      log.info({ disks: disks.map((d) => d.name) }, 'gave the VMI default disks for its volumes without one');
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) throw err;
      log.debug({ err }, 'VMI changed while defaulting it; the next sync will see it');
    }
  }
}
