// The evacuation controller (KubeVirt's drain/evacuation): a VMI that an
// eviction marked (status.evacuationNodeName == its node) gets an evacuation
// VMIM, `kubevirt-evacuation-*` with annotation kubevirt.io/evacuationMigration
// = the node; the migration controller runs it within the parallel limits
// (slots.ts) and KubeVirt's back-off (backoff.ts). Uncordoning the node
// cancels evacuations that have not started: their VMIMs are deleted and the
// mark cleared (evacuation.ts). Informer handlers only enqueue VMI keys;
// syncEvacuation reads the caches and acts, idempotently.
//
// It writes one VMI status field, evacuationNodeName, and only to clear it
// (the eviction webhook sets it): a merge patch of that field alone,
// conditional on the version read, so it never undoes another writer.
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectReference, type EventRecorder } from '../../kube/events.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../../kube/informer.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import {
  KUBEVIRT_API_VERSION,
  VMI_PLURAL,
  type EvictionStrategy,
  type VirtualMachineInstance,
  type VirtualMachineInstanceMigration,
} from '../../kubevirt/types.js';
import type { Logger } from '../../log.js';
import { CREATED_BY_LABEL, VMI_NAME_LABEL } from '../launcher-pod.js';
import { QueuedController } from '../queued-controller.js';
import { VMIM_VMI_LABEL } from './admission.js';
import { EVACUATION_ANNOTATION } from './backoff.js';
import { EVACUATION_CORDONED, nextEvacuationStep } from './evacuation.js';

export interface EvacuationControllerOptions {
  kubevirt: KubevirtApi;
  vmis: ClusterInformer<VirtualMachineInstance>;
  vmims: ClusterInformer<VirtualMachineInstanceMigration>;
  /** Launcher pods in every namespace. */
  pods: ClusterInformer<V1Pod>;
  /** vkvm nodes (cordoned ones too). */
  nodes: ClusterInformer<V1Node>;
  /** The cluster's evictionStrategy, for VMIs that set none. */
  evictionStrategy: EvictionStrategy;
  events: EventRecorder;
  workers?: number;
  log: Logger;
}

export class EvacuationController extends QueuedController {
  constructor(private readonly o: EvacuationControllerOptions) {
    super({ name: 'syncEvacuationsFromKubernetes', workers: o.workers ?? 1, log: o.log });
    o.vmis.onChange((vmi) => {
      if (vmi.status?.evacuationNodeName) this.enqueue(keyOfObject(vmi));
    });
    o.vmims.onChange((m) => this.enqueue(objectKey(m.metadata.namespace ?? 'default', m.spec.vmiName)));
    o.pods.onChange((pod) => {
      const name = pod.metadata?.labels?.[VMI_NAME_LABEL];
      if (name) this.enqueue(objectKey(pod.metadata?.namespace ?? 'default', name));
    });
    // A cordon or uncordon matters to the VMIs marked to leave that node.
    o.nodes.onChange((node) => {
      for (const vmi of o.vmis.list()) if (vmi.status?.evacuationNodeName === node.metadata?.name) this.enqueue(keyOfObject(vmi));
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncEvacuation(key);
  }

  protected ownedKeys(): string[] {
    return this.o.vmis
      .list()
      .filter((vmi) => vmi.status?.evacuationNodeName)
      .map(keyOfObject);
  }

  async syncEvacuation(key: string): Promise<void> {
    const vmi = this.o.vmis.get(key);
    if (!vmi?.status?.evacuationNodeName) return;
    const namespace = vmi.metadata.namespace ?? 'default';
    const name = vmi.metadata.name!;
    const log = this.o.log.child({ vmi: key, uid: vmi.metadata.uid });
    const node = this.o.nodes.get(vmi.status.evacuationNodeName);
    const mine = (m: VirtualMachineInstanceMigration) => m.metadata.namespace === namespace && m.spec.vmiName === name;
    const view = {
      vmi,
      strategy: vmi.spec.evictionStrategy ?? this.o.evictionStrategy,
      nodeCordoned: node ? node.spec?.unschedulable === true : undefined,
      migrations: this.o.vmims.list().filter(mine),
      activePods: this.o.pods
        .list()
        .filter(
          (p) => p.metadata?.labels?.[CREATED_BY_LABEL] === vmi.metadata.uid && !['Succeeded', 'Failed'].includes(p.status?.phase ?? ''),
        ).length,
    };
    let step = nextEvacuationStep(view);
    if (step.kind === 'migrate') {
      // The cache may lag this controller's own last create: ask the API server before making a second one.
      const { items } = await this.o.kubevirt.listVmims(namespace);
      step = nextEvacuationStep({ ...view, migrations: items.filter(mine) });
    }
    switch (step.kind) {
      case 'none':
        log.debug({ why: step.why }, 'evacuation: nothing to do');
        return;
      case 'migrate': {
        const created = await this.o.kubevirt.createVmim({
          apiVersion: KUBEVIRT_API_VERSION,
          kind: 'VirtualMachineInstanceMigration',
          metadata: {
            generateName: 'kubevirt-evacuation-',
            namespace,
            labels: { [VMIM_VMI_LABEL]: name },
            annotations: { [EVACUATION_ANNOTATION]: step.node, ...(step.cordoned ? { [EVACUATION_CORDONED]: 'true' } : {}) },
          },
          spec: { vmiName: name },
        });
        log.info({ migration: created.metadata.name, node: step.node, cordoned: step.cordoned }, 'evacuation migration created');
        this.event(vmi, 'Normal', 'SuccessfulCreate', `Created Migration ${created.metadata.name}`);
        return;
      }
      case 'cancel': {
        for (const m of view.migrations.filter((x) => step.deleteVmims.includes(x.metadata.name!))) {
          await this.o.kubevirt.deleteVmim(namespace, m.metadata.name!, m.metadata.uid!).catch((err: unknown) => {
            if (!isNotFound(err) && !isConflict(err)) throw err;
          });
        }
        const node = vmi.status.evacuationNodeName;
        if (await this.clearMark(vmi, log)) {
          log.info({ node, deleted: step.deleteVmims }, 'node uncordoned: evacuation canceled');
          this.event(vmi, 'Normal', 'EvacuationCanceled', `Node ${node} was uncordoned before the VM left it: evacuation canceled`);
        }
        return;
      }
      case 'clear':
        await this.clearMark(vmi, log);
        return;
    }
  }

  /** Clears status.evacuationNodeName; false when the VMI changed meanwhile (its watch event syncs it again). */
  private async clearMark(vmi: VirtualMachineInstance, log: Logger): Promise<boolean> {
    try {
      await this.o.kubevirt.patchStatus(VMI_PLURAL, vmi.metadata.namespace ?? 'default', vmi.metadata.name!, vmi.metadata.resourceVersion, {
        evacuationNodeName: null,
      });
      return true;
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) throw err;
      log.debug({ err }, 'VMI changed while clearing its evacuation mark; the next sync will see it');
      return false;
    }
  }

  private event(vmi: VirtualMachineInstance, type: 'Normal' | 'Warning', reason: string, message: string): void {
    this.o.events.recordFor(
      objectReference({ ...vmi, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance' }),
      type,
      reason,
      message,
    );
  }
}
