// The VirtualMachinePool controller (KubeVirt's virt-controller pool loop):
// keeps `replicas` VMs named `<pool>-<index>` from the pool's template,
// brings VMs made from an older template up to date and restarts their
// VMIs, and writes the pool's status (its one writer). Handlers only enqueue
// the pool's `ns/name` (a VM's change, and its VMI's, wake the pool that
// controls the VM); syncPool reads the caches, acts as pool-plan.ts decides
// and is idempotent. Names are fixed, so a create is never made twice; a
// delete waits until the cache shows the last ones (expectations.ts), so a
// sync that outruns its watch events never deletes one VM too many. Events
// are KubeVirt's (virtualmachinepool-controller).
import type { Logger } from '../../log.js';
import { objectReference, type EventRecorder } from '../../kube/events.js';
import { apiMessage, isConflict, isNotFound } from '../../kube/errors.js';
import { QueuedController } from '../queued-controller.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../../kube/informer.js';
import { statusPatch } from '../../kube/status-patch.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { POOL_API_VERSION, type VirtualMachinePool } from '../../kubevirt/replica-types.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../kubevirt/types.js';
import { restartRequired } from '../vm-sync.js';
import { WrittenVersions } from '../written-versions.js';
import { Expectations } from './expectations.js';
import { isVmReady, planPool, vmsOf, type PoolPlan } from './pool-plan.js';
import { indexOfName, poolVmContent, vmForPool } from './pool-vm.js';
import type { ReplicaApi } from './replica-api.js';
import { nextReplicaStatus, pauseEvent, POOL_PAUSED, REPLICA_STATUS_FIELDS, type ReplicaFailure } from './replica-status.js';
import { cacheView, controllerKey } from './replicaset-controller.js';

export interface PoolControllerOptions {
  api: ReplicaApi;
  kubevirt: KubevirtApi;
  pools: ClusterInformer<VirtualMachinePool>;
  vms: ClusterInformer<VirtualMachine>;
  vmis: ClusterInformer<VirtualMachineInstance>;
  events: EventRecorder;
  workers?: number;
  log: Logger;
  now?: () => Date;
  /** In [0, 1): the Random scale-in order. */
  random?: () => number;
}

/** The apiserver's own words (`exceeded quota: ...`), as KubeVirt's conditions and events carry them. */
const message = apiMessage;

/** KubeVirt's reason for a failed step of each kind, and its wording. */
const FAILURE = {
  scaleOut: { reason: 'FailedScaleOut', prefix: 'Error during scale out' },
  scaleIn: { reason: 'FailedScaleIn', prefix: 'Error during scale in' },
  update: { reason: 'FailedUpdate', prefix: 'Error during VM update' },
} as const;

export class PoolController extends QueuedController {
  private readonly written = new WrittenVersions();
  private readonly expectations = new Expectations();
  private readonly now: () => Date;
  private readonly random: () => number;

  constructor(private readonly o: PoolControllerOptions) {
    super({ name: 'syncPoolsFromKubernetes', workers: o.workers ?? 4, log: o.log });
    this.now = o.now ?? (() => new Date());
    this.random = o.random ?? Math.random;
    o.pools.onChange((pool) => this.enqueue(keyOfObject(pool)));
    o.vms.onChange((vm) => {
      const key = controllerKey(vm, 'VirtualMachinePool');
      if (key) this.enqueue(key);
    });
    o.vmis.onChange((vmi) => {
      // A VMI's VM has its name; the VM's pool is the one to wake.
      const vm = o.vms.get(keyOfObject(vmi));
      const key = vm && controllerKey(vm, 'VirtualMachinePool');
      if (key) this.enqueue(key);
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncPool(key);
  }

  protected ownedKeys(): string[] {
    return this.o.pools.list().map(keyOfObject);
  }

  async syncPool(key: string): Promise<void> {
    const pool = this.o.pools.get(key);
    if (!pool) return this.expectations.forget(key);
    if (this.written.stale(key, pool)) return;
    const namespace = pool.metadata.namespace ?? 'default';
    const inNamespace = this.o.vms.list().filter((vm) => (vm.metadata.namespace ?? 'default') === namespace);
    const owned = vmsOf(pool, inNamespace);
    const nowMs = this.now().getTime();
    const plan: PoolPlan = this.expectations.satisfied(key, cacheView(inNamespace), nowMs)
      ? planPool({
          pool,
          owned,
          takenNames: new Set(inNamespace.map((vm) => vm.metadata.name!)),
          vmiOf: (name) => this.o.vmis.get(objectKey(namespace, name)),
          restartRequired,
          random: this.random,
        })
      : { kind: 'idle' };
    const ref = objectReference({ ...pool, apiVersion: POOL_API_VERSION, kind: 'VirtualMachinePool' });
    const failure = await this.act(key, pool, plan, ref, nowMs);

    const next = nextReplicaStatus({
      current: pool.status,
      selector: pool.spec.selector,
      paused: Boolean(pool.spec.paused),
      pausedWording: POOL_PAUSED,
      replicas: owned.length,
      readyReplicas: owned.filter(isVmReady).length,
      ...(failure ? { failure: failure.condition } : {}),
      now: this.now(),
    });
    const patch = statusPatch(pool.status, next, REPLICA_STATUS_FIELDS);
    if (patch) {
      try {
        this.written.record(
          key,
          await this.o.api.patchStatus('pool', namespace, pool.metadata.name!, pool.metadata.resourceVersion, patch),
        );
        const pause = pauseEvent(pool.status, next);
        if (pause === 'paused') this.o.events.recordFor(ref, 'Normal', 'SuccessfulPaused', 'Pool is paused');
        if (pause === 'resumed') this.o.events.recordFor(ref, 'Normal', 'SuccessfulResume', 'Pool is unpaused');
        // KubeVirt records a failure once, when its condition appears.
        if (failure && !pool.status?.conditions?.some((c) => c.type === 'ReplicaFailure'))
          this.o.events.recordFor(ref, 'Warning', failure.condition.reason, failure.condition.message);
      } catch (err) {
        if (!isConflict(err) && !isNotFound(err)) throw err;
      }
    }
    if (failure) throw failure.error;
  }

  /** Carries out the plan; the first failure, as the pool's condition and the error to retry on. */
  private async act(
    key: string,
    pool: VirtualMachinePool,
    plan: PoolPlan,
    ref: ReturnType<typeof objectReference>,
    nowMs: number,
  ): Promise<{ condition: ReplicaFailure; error: unknown } | undefined> {
    const log = this.o.log.child({ pool: key, uid: pool.metadata.uid });
    let failure: { condition: ReplicaFailure; error: unknown } | undefined;
    const fail = (step: keyof typeof FAILURE, err: unknown) => {
      failure ??= { condition: { reason: FAILURE[step].reason, message: `${FAILURE[step].prefix}: ${message(err)}` }, error: err };
    };
    const at = (vm: VirtualMachine) => `${vm.metadata.namespace ?? 'default'}/${vm.metadata.name}`;
    switch (plan.kind) {
      case 'idle':
        return undefined;
      case 'scaleOut':
        await Promise.all(
          plan.names.map(async (name) => {
            try {
              const vm = await this.o.api.createVm(vmForPool(pool, indexOfName(name)!));
              this.expectations.created(key, vm.metadata.uid!, nowMs);
              this.o.events.recordFor(ref, 'Normal', 'SuccessfulCreate', `Created VM ${at(vm)}`);
            } catch (err) {
              fail('scaleOut', err);
              this.o.events.recordFor(ref, 'Warning', 'FailedCreate', `Error creating VM: ${message(err)}`);
            }
          }),
        );
        log.info({ names: plan.names }, 'scaled out');
        return failure;
      case 'scaleIn':
        await Promise.all(
          plan.vms.map(async (vm) => {
            try {
              await this.o.api.deleteVm(vm.metadata.namespace ?? 'default', vm.metadata.name!, vm.metadata.uid!);
              this.expectations.deleted(key, vm.metadata.uid!, nowMs);
              this.o.events.recordFor(ref, 'Normal', 'SuccessfulDelete', `Deleted VM ${at(vm)} with uid ${vm.metadata.uid} from pool`);
            } catch (err) {
              if (isNotFound(err) || isConflict(err)) return;
              fail('scaleIn', err);
              this.o.events.recordFor(
                ref,
                'Warning',
                'FailedDelete',
                `Error deleting virtual machine ${vm.metadata.name}: ${message(err)}`,
              );
            }
          }),
        );
        log.info({ names: plan.vms.map((vm) => vm.metadata.name) }, 'scaled in');
        return failure;
      case 'update':
        await Promise.all([
          ...plan.vms.map(async (vm) => {
            try {
              await this.o.api.replaceVmContent(vm, poolVmContent(pool, indexOfName(vm.metadata.name!) ?? 0));
              this.o.events.recordFor(ref, 'Normal', 'SuccessfulUpdate', `Updated VM ${at(vm)}`);
            } catch (err) {
              fail('update', err);
              this.o.events.recordFor(ref, 'Warning', 'FailedUpdate', `Error updating virtual machine ${at(vm)}: ${message(err)}`);
            }
          }),
          ...plan.restart.map(async (vmi) => {
            const vm = `${vmi.metadata.namespace ?? 'default'}/${vmi.metadata.name}`;
            try {
              await this.o.kubevirt.deleteVmi(vmi.metadata.namespace ?? 'default', vmi.metadata.name!, vmi.metadata.uid!);
              this.o.events.recordFor(ref, 'Normal', 'SuccessfulDelete', `Proactive update of VM ${vm} by deleting outdated VMI`);
            } catch (err) {
              if (isNotFound(err) || isConflict(err)) return;
              fail('update', err);
              this.o.events.recordFor(
                ref,
                'Warning',
                'FailedUpdate',
                `Error proactively updating VM ${vm} by deleting outdated VMI: ${message(err)}`,
              );
            }
          }),
        ]);
        log.info({ updated: plan.vms.map((vm) => vm.metadata.name), restarted: plan.restart.map((v) => v.metadata.name) }, 'updated');
        return failure;
    }
  }
}
