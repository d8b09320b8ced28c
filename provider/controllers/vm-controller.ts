// The VM controller (KubeVirt's virt-controller VM loop): each VirtualMachine
// has at most one VMI, named after it and controlled by it, created, deleted
// or kept as desiredVmi (vm-status.ts) says for its run strategy; the VM's
// status is derived from the VM and its VMI and written only when it changed.
// Handlers only enqueue `ns/name` (a VM and its VMI share the key; a
// DataVolume wakes the VM that controls it, as KubeVirt watches them); syncVm
// reads the caches and is idempotent. A VMI is never created twice: its name
// is fixed, so a second create fails with AlreadyExists, which is success.
// Creates and deletes are recorded as Events on the VM, as KubeVirt words them.
import type { Logger } from '../log.js';
import { QueuedController } from './queued-controller.js';
import { objectReference, type EventRecorder } from '../kube/events.js';
import { apiMessage, isConflict, isNamespaceTerminating, isNotFound } from '../kube/errors.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../kube/informer.js';
import { WrittenVersions } from './written-versions.js';
import type { KubevirtApi } from '../kubevirt/client.js';
import { statusPatch } from '../kube/status-patch.js';
import { KUBEVIRT_API_VERSION, VM_PLURAL, type VirtualMachine, type VirtualMachineInstance } from '../kubevirt/types.js';
import { desiredVmi, haltedStartSpec, nextStartFailure, startBackoffRemainingMs } from './vm-status.js';
import { controlledBy, nextVmStatus, unsupportedVmFields, vmiFromTemplate, VM_STATUS_FIELDS, type ActionOutcome } from './vm-sync.js';
import { findCondition, unsupportedMessage } from '../kubevirt/conditions.js';
import type { VmiAction } from './vm-status.js';
import { nameAnnotations } from '../kubevirt/instancetype/expand.js';
import { InstancetypeRefusal, type Instancetypes, type InstancetypeSync } from './instancetypes.js';
import { dataVolumesState, vmKeyOfDataVolume, type DataVolumesState, type VmDataVolumes } from './vm-datavolumes.js';
import type { DataVolume } from '../kubevirt/datavolume-types.js';

/** How long a created VMI may be missing from the cache before the VM stops counting it as starting. */
const CREATE_EXPECTATION_MS = 60_000;

export interface VmControllerOptions {
  kubevirt: KubevirtApi;
  vms: ClusterInformer<VirtualMachine>;
  vmis: ClusterInformer<VirtualMachineInstance>;
  events: EventRecorder;
  /** Expands the instancetypes and preferences VMs name. */
  instancetypes: Instancetypes;
  /** Makes and reads the DataVolumes of VMs' dataVolumeTemplates. */
  dataVolumes: VmDataVolumes;
  /** Every DataVolume: a change wakes the VM that controls it (its VMI may wait for it). */
  dataVolumeEvents: ClusterInformer<DataVolume>;
  workers?: number;
  log: Logger;
  now?: () => Date;
  /** In [0, 1): the crash-loop back-off's jitter. */
  random?: () => number;
}

export class VmController extends QueuedController {
  private readonly written = new WrittenVersions();
  /** VMIs this controller created that the cache does not show yet, by key: when. */
  private readonly pendingCreates = new Map<string, number>();
  private readonly now: () => Date;
  private readonly random: () => number;

  constructor(private readonly o: VmControllerOptions) {
    super({ name: 'syncVmsFromKubernetes', workers: o.workers ?? 4, log: o.log });
    this.now = o.now ?? (() => new Date());
    this.random = o.random ?? Math.random;
    o.vms.onChange((vm) => this.enqueue(keyOfObject(vm)));
    o.vmis.onChange((vmi) => {
      this.enqueue(keyOfObject(vmi));
      const namespace = vmi.metadata.namespace ?? 'default';
      for (const ref of vmi.metadata.ownerReferences ?? []) {
        if (ref.controller && ref.kind === 'VirtualMachine' && ref.name !== vmi.metadata.name) this.enqueue(objectKey(namespace, ref.name));
      }
    });
    o.dataVolumeEvents.onChange((dv) => {
      const key = vmKeyOfDataVolume(dv);
      if (key) this.enqueue(key);
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncVm(key);
  }

  protected ownedKeys(): string[] {
    return this.o.vms.list().map(keyOfObject);
  }

  private createPending(key: string, vmi: VirtualMachineInstance | undefined, nowMs: number): boolean {
    const at = this.pendingCreates.get(key);
    if (at === undefined) return false;
    if (vmi || nowMs - at > CREATE_EXPECTATION_MS) {
      this.pendingCreates.delete(key);
      return false;
    }
    return true;
  }

  /**
   * The VM's template with its instancetype and preference expanded, and its status refs (none when it
   * names neither); or what refuses them, with the refs as they were.
   */
  private async expand(vm: VirtualMachine): Promise<{
    template: VirtualMachine['spec']['template'];
    refs?: InstancetypeSync['refs'];
    refusal?: InstancetypeRefusal;
    /** The VM's matchers were just rewritten: nothing else to do in this sync. */
    inferred?: true;
  }> {
    if (!vm.spec.instancetype && !vm.spec.preference) return { template: vm.spec.template, refs: {} };
    try {
      const inferred = await this.o.instancetypes.inference(vm);
      if (inferred) {
        // As KubeVirt's mutating webhook would have written it; the VM's watch event brings it back.
        await this.o.kubevirt.patch(VM_PLURAL, vm.metadata.namespace ?? 'default', vm.metadata.name!, { spec: inferred });
        return { template: vm.spec.template, inferred: true };
      }
      const { refs, expanded } = await this.o.instancetypes.sync(vm);
      if (expanded.ok) {
        const { metadata, spec } = expanded.template;
        const annotations = { ...(metadata?.annotations ?? {}), ...nameAnnotations(vm) };
        return { template: { metadata: { ...(metadata ?? {}), annotations }, spec }, refs };
      }
      return { template: vm.spec.template, refs, refusal: new InstancetypeRefusal(expanded.field, expanded.message) };
    } catch (err) {
      if (err instanceof InstancetypeRefusal) return { template: vm.spec.template, refusal: err };
      throw err;
    }
  }

  /** Makes the VM's VMI match its run strategy, then writes the VM status if it changed. */
  async syncVm(key: string): Promise<void> {
    const vm = this.o.vms.get(key);
    if (!vm) {
      // The garbage collector removes the VMI of a deleted VM (ownerReference).
      this.pendingCreates.delete(key);
      return;
    }
    if (this.written.stale(key, vm)) return;
    const log = this.o.log.child({ vm: key, uid: vm.metadata.uid });
    const cached = this.o.vmis.get(key);
    const vmi = cached && controlledBy(cached, vm) ? cached : undefined;
    const started = haltedStartSpec(vm, vmi);
    if (started) {
      // The VM's own watch event brings it back here with the new strategy and the request still pending.
      await this.o.kubevirt.patch(VM_PLURAL, vm.metadata.namespace ?? 'default', vm.metadata.name!, { spec: started });
      log.info({ spec: started }, 'start request on a Halted VM: set it to run');
      return;
    }
    const now = this.now();
    const jitter = this.random();
    const createPending = this.createPending(key, vmi, now.getTime());

    // Decide with the start failure this sync records, so a VMI that just failed starts the back-off now.
    const startFailure = nextStartFailure(vm, vmi, now, jitter);
    const deciding: VirtualMachine = { ...vm, status: { ...(vm.status ?? {}), startFailure } };
    let action: VmiAction = desiredVmi(deciding, vmi, now);
    if (action === 'create' && cached && !vmi) {
      // Another VM's VMI (an older VM of this name, being collected) holds the name; its deletion requeues.
      log.info({ vmiOwner: cached.metadata.ownerReferences }, 'a VMI of this name not controlled by this VM exists; waiting for it to go');
      action = 'keep';
    }

    let outcome: ActionOutcome = { ok: true };
    let failure: unknown;
    const ref = objectReference({ ...vm, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachine' });
    const expansion = await this.expand(vm);
    if (expansion.inferred) return;
    if (expansion.refusal && action !== 'delete') {
      // Nothing is made from a VM its instancetype refuses; a missing object may appear later, so that is retried.
      action = 'keep';
      outcome = { ok: false, reason: 'FailedCreate', message: expansion.refusal.message };
      if (expansion.refusal.retry) failure = expansion.refusal;
      if (findCondition(vm.status?.conditions, 'Failure')?.message !== outcome.message)
        this.o.events.recordFor(ref, 'Warning', 'FailedCreate', `Error creating virtual machine instance: ${expansion.refusal.message}`);
    }
    const unsupported = unsupportedVmFields(vm);
    // Stateless: the condition already on the VM tells whether this set was reported.
    if (unsupported.length && findCondition(vm.status?.conditions, 'UnsupportedFields')?.message !== unsupportedMessage(unsupported)) {
      this.o.events.recordFor(
        ref,
        'Warning',
        'UnsupportedFields',
        `vkvm does not realize these VM fields; the VM runs without them: ${unsupported.join(', ')}`,
      );
    }
    // Before the first VMI, and kept: a VM's DataVolumes outlive its VMIs (not while the VM is being deleted).
    let dataVolumes: DataVolumesState | undefined;
    const templates = vm.spec.dataVolumeTemplates ?? [];
    if (templates.length && !vm.metadata.deletionTimestamp) {
      try {
        dataVolumes = dataVolumesState(
          await this.o.dataVolumes.ensure(vm),
          templates.map((x) => x.metadata.name),
        );
      } catch (err) {
        failure = err;
        outcome = { ok: false, reason: 'FailedCreate', message: `failed to create the DataVolumes: ${apiMessage(err)}` };
        this.o.events.recordFor(ref, 'Warning', 'FailedCreate', `Error creating DataVolume: ${apiMessage(err)}`);
        if (action === 'create') action = 'keep';
      }
      if (action === 'create' && dataVolumes && dataVolumes.state !== 'ready') {
        log.debug({ dataVolumes }, 'the VMI waits for its DataVolumes');
        action = 'keep';
      }
    }
    if (action === 'create') {
      try {
        const created = await this.o.kubevirt.createVmi(vmiFromTemplate(vm, expansion.template));
        log.info('created the VMI');
        this.o.events.recordFor(
          ref,
          'Normal',
          'SuccessfulCreate',
          `Started the virtual machine by creating the new virtual machine instance ${created.metadata.name}`,
        );
      } catch (err) {
        if (!isConflict(err)) {
          outcome = { ok: false, reason: 'FailedCreate', message: `failed to create the VMI: ${apiMessage(err)}` };
          // A namespace being deleted takes the VM with it: no retry, and no Event (refused there too).
          if (isNamespaceTerminating(err)) log.info('the namespace is being deleted: no VMI is created');
          else {
            failure = err;
            this.o.events.recordFor(ref, 'Warning', 'FailedCreate', `Error creating virtual machine instance: ${apiMessage(err)}`);
          }
        }
      }
      if (outcome.ok) this.pendingCreates.set(key, now.getTime());
    } else if (action === 'delete' && vmi) {
      try {
        await this.o.kubevirt.deleteVmi(vmi.metadata.namespace ?? 'default', vmi.metadata.name!, vmi.metadata.uid!);
        log.info({ phase: vmi.status?.phase }, 'deleted the VMI');
        this.o.events.recordFor(
          ref,
          'Normal',
          'SuccessfulDelete',
          `Stopped the virtual machine by deleting the virtual machine instance ${vmi.metadata.uid}`,
        );
      } catch (err) {
        // Gone already, or replaced (the UID precondition failed): either way this VMI is deleted.
        if (!isNotFound(err) && !isConflict(err)) {
          failure = err;
          outcome = { ok: false, reason: 'FailedDelete', message: `failed to delete the VMI: ${apiMessage(err)}` };
          this.o.events.recordFor(
            ref,
            'Warning',
            'FailedDelete',
            `Error deleting virtual machine instance ${vmi.metadata.name}: ${apiMessage(err)}`,
          );
        }
      }
    }

    const next = nextVmStatus({
      vm,
      ...(vmi ? { vmi } : {}),
      action,
      outcome,
      createPending: createPending || (action === 'create' && outcome.ok),
      now,
      jitter,
      ...(dataVolumes && dataVolumes.state !== 'ready' ? { dataVolumes: dataVolumes.state } : {}),
    });
    if (expansion.refs) {
      next.instancetypeRef = expansion.refs.instancetypeRef;
      next.preferenceRef = expansion.refs.preferenceRef;
    }
    const patch = statusPatch(vm.status, next, VM_STATUS_FIELDS);
    if (patch) {
      try {
        const rv = await this.o.kubevirt.patchStatus(
          VM_PLURAL,
          vm.metadata.namespace ?? 'default',
          vm.metadata.name!,
          vm.metadata.resourceVersion,
          patch,
        );
        this.written.record(key, rv);
        if (patch.printableStatus) log.info({ printableStatus: next.printableStatus }, 'VM status changed');
      } catch (err) {
        // Changed since the cache read it (its watch event requeues the key), or deleted.
        if (!isConflict(err) && !isNotFound(err)) throw err;
        log.debug({ err }, 'VM changed while syncing; the next sync will see it');
      }
    }
    if (failure) throw failure;
    // Waiting out a crash-loop back-off: nothing else will wake the key.
    if (action === 'keep' && !vmi) {
      const waitMs = startBackoffRemainingMs({ ...vm, status: next }, now);
      if (waitMs > 0) this.enqueueAfter(key, waitMs + 100);
    }
  }
}
