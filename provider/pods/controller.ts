// The pod controller: every pod bound to this node becomes a VM run by its own
// launcher. Two queues of keys, as virtual-kubelet's pod controller:
//   syncPodsFromKubernetes  makes the VM match the pod: the pod's lifecycle
//                           (lifecycle.ts) says where it stands, the runtime
//                           (vm-runtime.ts) acts on the VM
//   syncStatusFromLauncher  writes the pod's and its VMI's status (status-writer.ts)
// Informer and launcher events only enqueue keys; both handlers read the latest state and are idempotent, so a crash at
// any point is repaired by the next pass. Deletions run beside the queues, one per VM. At start-up the launchers left
// running are re-attached before anything acts, and VMs without a pod are removed only after the pod list is synced.
import { isDeepStrictEqual } from 'node:util';
import type { V1Pod } from '@kubernetes/client-node';
import { every, systemClock, type Clock } from '../clock.js';
import { isConflict, isNotFound } from '../kube/errors.js';
import type { EventRecorder } from '../kube/events.js';
import { keyOfObject, type ClusterInformer } from '../kube/informer.js';
import { KeyQueue } from '../kube/key-queue.js';
import type { LiveLauncher, Launchers, VmControl } from '../launchers/registry.js';
import type { Logger } from '../log.js';
import type { AgentMetrics } from '../metrics.js';
import type { ChildCpuMeter } from '../child-cpu.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { PressureCondition } from '../node/status.js';
import { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';
import {
  DEFAULT_RESTART_BACKOFF,
  newLifecycle,
  transition,
  type LifecycleEvent,
  type PodLifecycle,
  type RestartBackoff,
} from './lifecycle.js';
import { NodeAdmission } from './node-admission.js';
import { PodMigrations, type PodMigrationsOptions } from './pod-migrations.js';
import { measured } from './sync-metrics.js';
import { observeVm, vmStopped } from './observe.js';
import type { PodApi } from './pod-api.js';
import { recordEntered } from './lifecycle-events.js';
import { removeOrphans, sweepOrphans, type OrphanSweepOptions } from './orphans.js';
import { StatusWriter, type StatusWriterOptions } from './status-writer.js';
import type { GuestAgent } from './probes/run-probe.js';
import { dirUsageBytes, evictOverLimit, runningVms, STORAGE_CHECK_INTERVAL_MS, type StorageEvictionOptions } from './storage-eviction.js';
import { vmiOwner, type VmiSource } from './vmi-source.js';
import { NetworkSetupError, VmRuntime, type VmNetwork, type VmRuntimeOptions } from './vm-runtime.js';
import { VmStarts } from './vm-starts.js';

/** The pods bound to this node, as the controller reads them (createPodInformer; a fake in unit tests). */
export type PodInformer = Pick<ClusterInformer<V1Pod>, 'start' | 'stop' | 'get' | 'list' | 'onChange'>;

export interface PodControllerOptions extends Pick<StatusWriterOptions, 'accelerator'>, Pick<VmRuntimeOptions, 'imports'> {
  pods: PodInformer;
  launchers: Launchers<VmControl>;
  /** Launcher pods of KubeVirt VMIs: their spec comes from the VMI, and the VMI gets this node's status. */
  vmis: VmiSource;
  /** Addresses, namespaces and DHCP of the VMs' NICs. */
  network: VmNetwork;
  /** The CSI volumes of VMs: published before a start (vm-runtime.ts), taken down when the VM goes (csi-node/pod-volumes.ts). */
  volumes?: VmRuntimeOptions['volumes'] & OrphanSweepOptions['volumes'];
  api: PodApi;
  hostIP: () => string;
  /** Pulls the registry images a VM needs before its launcher starts (provider/images/). */
  images: VmRuntimeOptions['images'];
  /** Downloads a URL image into the node's image cache before its launcher starts. */
  downloadImage: VmRuntimeOptions['downloadImage'];
  urlImages?: VmRuntimeOptions['urlImages'];
  dns?: VmRuntimeOptions['dns'];
  /** Starts fetching images (pulls, downloads) at once, beside the sync workers; the others wait their turn. */
  maxParallelPreparations?: number;
  events: EventRecorder;
  metrics: AgentMetrics;
  log: Logger;
  clock?: Clock;
  restartBackoff?: RestartBackoff;
  /** Bytes a VM's directory takes on disk (storage-eviction.ts's dirUsageBytes; a fake in unit tests). */
  usageBytes?: (dir: string) => Promise<number>;
  /** The pressure conditions the node is under now, which refuse new pods (provider/node/status.ts); none when absent. */
  nodePressure?: () => readonly PressureCondition[];
  /** The node's allocatable as its status reports it (provider/node/status.ts), which new pods must fit in; none when absent. */
  nodeAllocatable?: () => Record<string, string>;
  /** Concurrent pod syncs; one pod never syncs twice at once. */
  workers?: number;
  /** Charges the agent's host commands to the VM starts they were for (vkvm_cpu_ms_per_vm_start). */
  childCpu?: ChildCpuMeter;
  /** A running VM's guest agent, for exec and guestAgentPing readiness probes (such probes fail without it). */
  guestAgent?: (uid: string) => GuestAgent | undefined;
  /** The node's sides of live migration; without them it receives none (a target pod is held) and starts none. */
  migration?: Pick<PodMigrationsOptions, 'target' | 'source'>;
}

const TERMINAL = new Set(['Succeeded', 'Failed']);
const ORPHAN_SWEEP_MS = 30_000;
/** The kubelet's grace period for an eviction that cannot wait (immediateEvictionGracePeriodSeconds). */
const EVICTION_GRACE_PERIOD_S = 1;
/** How soon a VM waiting for the node's pod range tries again. */
const NETWORK_RETRY_MS = 1_000;

export class PodController {
  private readonly podSync: KeyQueue;
  private readonly statusSync: KeyQueue;
  private readonly runtime: VmRuntime;
  private readonly starts: VmStarts;
  private readonly storage: StorageEvictionOptions;
  private readonly orphanSweep: OrphanSweepOptions;
  private readonly status: StatusWriter;
  private readonly admission: NodeAdmission;
  private readonly migrations: PodMigrations | undefined;
  private readonly clock: Clock;
  private readonly backoff: RestartBackoff;
  /** Every pod this agent acts on, by UID. */
  private readonly lifecycles = new Map<string, PodLifecycle>();
  /** Pod deletions under way, by pod UID. */
  private readonly deletions = new Map<string, Promise<void>>();
  private started = false;
  /** Stop the periodic repair (launchers unreachable at start-up, orphans no event pointed at) and the storage check. */
  private readonly stopPeriodic: Array<() => Promise<void>> = [];

  constructor(private readonly o: PodControllerOptions) {
    const clock = (this.clock = o.clock ?? systemClock);
    this.backoff = o.restartBackoff ?? DEFAULT_RESTART_BACKOFF;
    const syncPod = measured(o.metrics, (key) => this.syncPod(key));
    this.podSync = new KeyQueue(syncPod, { name: 'syncPodsFromKubernetes', workers: o.workers ?? 8, log: o.log, clock });
    this.statusSync = new KeyQueue((key) => this.syncStatus(key), { name: 'syncStatusFromLauncher', workers: 4, log: o.log, clock });
    this.runtime = new VmRuntime({ ...o, learnt: (uid, context) => this.learnt(uid, context) });
    const syncAfter = (key: string, delayMs: number) => this.podSync.addAfter(key, delayMs);
    this.starts = new VmStarts({
      runtime: this.runtime,
      apply: (pod, event) => this.apply(pod, event),
      sync: (key) => this.podSync.add(key),
      syncAfter,
      lifecycle: (uid) => this.lifecycles.get(uid),
      forgetLauncher: (uid) => o.launchers.forget(uid),
      maxParallelPreparations: o.maxParallelPreparations ?? 3,
      clock,
      metrics: o.metrics,
    });
    const [lifecycleOf, apply] = [(pod: V1Pod) => this.lifecycleOf(pod), (pod: V1Pod, e: LifecycleEvent) => this.apply(pod, e)];
    const lifecycles = () => this.lifecycles.values();
    this.admission = new NodeAdmission({ ...o, lifecycles, lifecycleOf, apply, receivesMigrations: !!o.migration });
    const lifecycle = (uid: string) => this.lifecycles.get(uid);
    const learnt = (uid: string, context: Parameters<PodController['learnt']>[1]) => this.learnt(uid, context);
    this.migrations = o.migration && new PodMigrations({ ...o, ...o.migration, lifecycle, apply, learnt, syncAfter });
    this.status = new StatusWriter({ ...o, clock, onReadinessChange: (key) => this.statusSync.add(key) });
    this.orphanSweep = {
      ...o, // its launchers, network, volumes and log
      pods: () => o.pods.list(),
      known: (uid) => this.lifecycles.has(uid),
      removeVm: (uid) => this.removeVm(uid, 0),
    };
    this.storage = {
      running: () =>
        runningVms(
          this.lifecycles.values(),
          (key) => o.pods.get(key),
          (uid) => o.launchers.get(uid),
        ),
      usageBytes: o.usageBytes ?? dirUsageBytes,
      evict: (pod, message) => this.evict(pod, message),
      log: o.log,
    };
    o.launchers.onChange((uid) => this.onVmChange(uid));
    o.network.onGuestDhcp((uid) => this.onVmChange(uid));
    o.pods.onChange((pod) => this.onPodEvent(keyOfObject(pod)));
  }

  /** Re-attach launchers, sync the pod list, remove VMs of pods that are gone, then start working. */
  async start(): Promise<void> {
    await this.o.launchers.prepare();
    const found = await this.o.launchers.discover();
    await this.o.pods.start();
    this.o.vmis.onChange((vmi) => this.onVmi(vmi));
    // Their launchers' events reach the pod from now on; the first sync takes the VM as it is, never restarts it.
    this.admission.readmit(this.o.pods.list());
    await this.o.network.ensureNode().catch((err: unknown) => this.o.log.warn({ err }, 'pod network not ready yet; will retry'));
    await removeOrphans(this.orphanSweep);
    this.started = true;
    this.o.vmis.follow(this.o.pods.list());
    for (const pod of this.o.pods.list()) this.onPodKey(keyOfObject(pod));
    this.stopPeriodic.push(
      every(this.clock, ORPHAN_SWEEP_MS, () => sweepOrphans(this.orphanSweep)),
      every(this.clock, STORAGE_CHECK_INTERVAL_MS, () => evictOverLimit(this.storage)),
    );
    this.o.log.info({ pods: this.o.pods.list().length, reattached: found.length }, 'pod controller started');
  }

  /** Stops; VMs run on unless `stopVms` (after the queues, so none restarts; CSI volumes taken down; dirs kept). */
  async stop(opts: { stopVms?: boolean; gracePeriodS?: number } = {}): Promise<void> {
    this.started = false;
    await Promise.all(this.stopPeriodic.map((stop) => stop()));
    this.podSync.stop();
    this.statusSync.stop();
    this.status.stop();
    await Promise.all([this.o.pods.stop(), this.o.vmis.stop()]);
    if (opts.stopVms) {
      await Promise.all(this.o.launchers.uids().map((uid) => this.o.launchers.stop(uid, opts.gracePeriodS ?? 30)));
      // Their VMs are down now; what is left of them is quick. Otherwise they end with the process, and the next agent resumes them.
      await Promise.all(this.deletions.values());
      await this.o.volumes?.retainOnly(() => false); // no mount or loop device outlives them; the drivers still run
    }
    this.o.launchers.close();
  }

  /** Resolves once no sync is queued or running and no deletion or preparation is under way (tests). */
  async idle(): Promise<void> {
    while (!this.podSync.isIdle() || !this.statusSync.isIdle() || this.deletions.size > 0 || !this.starts.isIdle()) {
      await Promise.all([this.podSync.idle(), this.statusSync.idle(), this.starts.idle(), ...this.deletions.values()]);
    }
  }

  pods(): readonly V1Pod[] {
    return this.o.pods.list();
  }

  pod(key: string): V1Pod | undefined {
    return this.o.pods.get(key);
  }

  /** A pod bound to this node was added, changed or deleted: the VMIs followed are those of the pods now bound. */
  private onPodEvent(key: string): void {
    if (this.started) this.o.vmis.follow(this.o.pods.list());
    this.onPodKey(key);
  }

  private onPodKey(key: string): void {
    if (!this.started) return;
    this.podSync.add(key);
    this.statusSync.add(key);
  }

  /** A VMI on this node changed (its spec, its paused annotation): its launcher pod syncs again. */
  private onVmi(vmi: VirtualMachineInstance): void {
    for (const pod of this.o.pods.list()) if (vmiOwner(pod)?.uid === vmi.metadata.uid) this.onPodKey(keyOfObject(pod));
  }

  /** A VM's launcher reported, or its guest took its address by DHCP (a readiness signal): its pod syncs again. */
  private onVmChange(uid: string): void {
    const running = this.o.launchers.uids().filter((u) => {
      const v = this.o.launchers.get(u);
      return v?.live && (v.state.phase === 'Running' || v.state.phase === 'Paused');
    });
    this.o.metrics.vmsRunning.set(running.length);
    const lc = this.lifecycles.get(uid);
    if (lc) this.onPodKey(lc.key);
  }

  private lifecycleOf(pod: V1Pod): PodLifecycle {
    const uid = pod.metadata!.uid!;
    if (!this.lifecycles.has(uid)) this.lifecycles.set(uid, newLifecycle(pod));
    return this.lifecycles.get(uid)!;
  }

  /**
   * Moves a pod's lifecycle on by one event (lifecycle.ts decides where to): stored, its status queued, the
   * Events of a state entered recorded. Undefined when the pod's VM was removed meanwhile.
   */
  private apply(pod: V1Pod, event: LifecycleEvent): PodLifecycle | undefined {
    const uid = pod.metadata!.uid!;
    const before = this.lifecycles.get(uid);
    if (!before) return undefined;
    const after = transition(before, event, this.clock.now(), this.backoff);
    if (after === before) return before;
    this.lifecycles.set(uid, after);
    this.statusSync.add(after.key);
    if (after.state.kind !== before.state.kind) {
      this.o.log.info({ pod: after.key, uid, from: before.state.kind, to: after.state.kind, event: event.type }, 'VM lifecycle');
      recordEntered(this.o.events, pod, after.state, event);
    }
    return after;
  }

  /** What the runtime learnt on its way to the spec; a new place on the network shows in the status before the VM boots. */
  private learnt(uid: string, context: Partial<Pick<PodLifecycle, 'vmi' | 'attachment' | 'imageID'>>): void {
    const lc = this.lifecycles.get(uid);
    if (!lc) return;
    this.lifecycles.set(uid, { ...lc, ...context });
    if ('attachment' in context && !isDeepStrictEqual(context.attachment, lc.attachment)) this.statusSync.add(lc.key);
  }

  // ---- syncPodsFromKubernetes -------------------------------------------------

  private async syncPod(key: string): Promise<void> {
    const pod = this.o.pods.get(key);
    // A VM under this key whose pod is gone, or was replaced by a new pod of the same name.
    for (const lc of [...this.lifecycles.values()]) {
      if (lc.key === key && lc.uid !== pod?.metadata?.uid) await this.removeVm(lc.uid, 0);
    }
    if (!pod?.metadata?.uid) return;
    const uid = pod.metadata.uid;
    const lc = this.lifecycleOf(pod);
    if (pod.metadata.deletionTimestamp) return this.startDeletion(pod, lc);
    // A kubelet never restarts a pod it reported as finished, and tears its network down.
    if (TERMINAL.has(pod.status?.phase ?? '') && !this.o.launchers.get(uid)?.live) return this.o.network.detach(uid);
    // Admission precedes anything made for the pod; a held pod (a migration target) gets nothing.
    if (this.admission.admit(pod) === 'held') return;
    if (this.lifecycles.get(uid)?.state.kind === 'Evicted') return this.stopEvicted(uid);
    if (this.migrations?.receiving(pod)) return this.migrations.syncIncoming(pod);

    if (this.starts.heldByBackOff(lc)) return;
    const spec = await this.runtime.desiredSpec(pod, lc).catch((err: unknown) => {
      if (err instanceof NetworkSetupError) this.starts.syncWhenDue(this.apply(pod, { type: 'startFailed', message: err.message }));
      throw err;
    });
    if (spec === 'gone') return;
    if (spec === 'waiting') return this.podSync.addAfter(key, NETWORK_RETRY_MS * (1 + Math.random()));
    if (spec instanceof SpecError) return void this.apply(pod, { type: 'invalid', message: spec.message, found: 'translation' });
    this.apply(pod, { type: 'valid' });
    await this.migrations?.syncOutgoing(pod);
    if (!(await this.observeLauncher(pod))) return;

    const current = this.lifecycles.get(uid);
    const view = this.o.launchers.get(uid);
    switch (current?.state.kind) {
      case 'Running':
        // A launcher that vanished under a running VM leaves nothing to keep: start anew.
        return view?.live ? this.keepRunning(pod, current, view, spec) : this.starts.start(pod, spec);
      case 'Waiting':
      case 'ImageBackOff':
      case 'StartBackOff':
        return this.starts.start(pod, spec);
      case 'Preparing':
        return this.starts.carryOn(pod, current, spec);
      case 'BackingOff':
        return this.starts.restart(pod, spec);
      default:
      // Finished stays so; Invalid and Terminating were dealt with above.
    }
  }

  /**
   * Folds the launcher's word into the lifecycle: a VM that runs is Running; a run that is over ends, its
   * launcher stopped first (which frees its libvirt daemon and cgroup; its last word stays in its state
   * file). False when the VM was removed meanwhile.
   */
  private async observeLauncher(pod: V1Pod): Promise<boolean> {
    const uid = pod.metadata!.uid!;
    const view = this.o.launchers.get(uid);
    if (!view) return true;
    if (!vmStopped(view)) return !!this.apply(pod, { type: 'launcherRunning' });
    this.apply(pod, { type: 'stopSeen' });
    if (view.live) await this.o.launchers.stop(uid, 0);
    const ended = this.o.launchers.get(uid);
    const lc = this.lifecycles.get(uid);
    if (!ended || !lc) return false;
    return !!this.apply(pod, { type: 'ended', vm: observeVm(ended, lc.history), restartPolicy: pod.spec?.restartPolicy ?? 'Always' });
  }

  private async keepRunning(pod: V1Pod, lc: PodLifecycle, live: LiveLauncher<VmControl>, spec: VmSpec): Promise<void> {
    const specHash = await this.runtime.keepInSync(pod, lc, live, spec);
    await this.runtime.reconcilePause(this.apply(pod, { type: 'specSynced', specHash }) ?? lc, live);
  }

  /**
   * Deletions run beside the queue, one per VM, as the kubelet gives each pod its own worker: a guest taking
   * its whole grace period must not hold a sync worker (eight such would stall every start), nor the pod's
   * key, so a force delete meanwhile is synced at once and kills the VM.
   */
  private startDeletion(pod: V1Pod, lc: PodLifecycle): void {
    this.apply(pod, { type: 'deleting' });
    if (this.deletions.has(lc.uid)) return;
    const deletion = this.finalizeDeletion(pod, lc)
      .then(() => this.podSync.forget(lc.key))
      .catch((err: unknown) => this.podSync.retryLater(lc.key, err))
      .finally(() => this.deletions.delete(lc.uid));
    this.deletions.set(lc.uid, deletion);
  }

  /** Graceful deletion: stop the VM within the grace period, remove everything, then release the pod object. */
  private async finalizeDeletion(pod: V1Pod, lc: PodLifecycle): Promise<void> {
    const view = this.o.launchers.get(lc.uid);
    const graceS = pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    if (view?.live && !vmStopped(view)) this.o.events.record(pod, 'Normal', 'Killing', `Stopping VM (grace period ${graceS}s)`);
    await this.removeVm(lc.uid, graceS);
    try {
      // The UID precondition: never delete a newer pod that took this name meanwhile.
      await this.o.api.deletePod(pod.metadata!.namespace!, pod.metadata!.name!, lc.uid);
      this.o.log.info({ pod: lc.key, uid: lc.uid }, 'pod deleted after its VM stopped');
    } catch (err) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }

  /** The VM used more disk than its pod may: Evicted, and the sync stops it. */
  private evict(pod: V1Pod, message: string): void {
    const lc = this.apply(pod, { type: 'evicted', message });
    if (lc?.state.kind !== 'Evicted') return;
    this.o.metrics.podEvictions.inc({ cause: 'ephemeral-storage' });
    this.podSync.add(lc.key);
  }

  /** An evicted pod's VM is stopped at once, as the kubelet kills an evicted pod's containers; its files stay until the pod goes. */
  private async stopEvicted(uid: string): Promise<void> {
    if (this.o.launchers.get(uid)?.live) await this.o.launchers.stop(uid, EVICTION_GRACE_PERIOD_S);
  }

  private async removeVm(uid: string, graceS: number): Promise<void> {
    this.starts.forget(uid);
    if (this.migrations) await this.migrations.remove(uid);
    await this.o.launchers.stop(uid, graceS);
    await this.o.launchers.remove(uid);
    await this.o.network.detach(uid);
    await this.o.volumes
      ?.unpublishPod(uid)
      .catch((err: unknown) => this.o.log.warn({ err, vm: uid }, 'CSI volumes not taken down yet: the orphan sweep (orphans.ts) retries'));
    this.lifecycles.delete(uid);
    this.status.forget(uid);
    this.runtime.forget(uid);
  }

  // ---- syncStatusFromLauncher -------------------------------------------------

  private async syncStatus(key: string): Promise<void> {
    const pod = this.o.pods.get(key);
    const lc = this.lifecycles.get(pod?.metadata?.uid ?? '');
    if (!pod || !lc) return;
    await this.status.sync(pod, lc, this.o.launchers.get(lc.uid));
  }
}
