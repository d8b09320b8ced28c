// The pod controller: every pod bound to this node becomes a VM run by its own
// launcher. Two queues of keys, as virtual-kubelet's pod controller:
//   syncPodsFromKubernetes  makes the VM match the pod (start, keep, restart, stop)
//   syncStatusFromLauncher  writes the pod status derived from what is known
// Informer and launcher events only enqueue keys; both handlers read the latest
// state and are idempotent, so a crash at any point is repaired by the next
// pass. At start-up the launchers left running are re-attached before anything
// acts, and VMs without a pod are removed only after the pod list is synced.
import { createHash } from 'node:crypto';
import type { V1ObjectReference, V1Pod, V1PodStatus } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { strategicMerge } from '../kube/client.js';
import { isConflict, isNotFound } from '../kube/errors.js';
import type { EventRecorder } from '../kube/events.js';
import type { Logger } from '../log.js';
import type { AgentMetrics } from '../metrics.js';
import { LauncherRegistry, type LauncherSettings, type LauncherView } from '../launchers/registry.js';
import { PreconditionError } from '../../launcher/agent-api.js';
import { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';
import { keyOfObject, type ClusterInformer } from '../kube/informer.js';
import { createPodInformer } from './informer.js';
import { observeVm, vmStopped, type PodVmRecord } from './observe.js';
import { KeyQueue } from '../kube/key-queue.js';
import { derivePodStatus, type PodStatusInput } from './status.js';
import { translatePod } from './translate.js';
import { type BuiltinImages } from '../vm-identity.js';
import { podStatusPatch, sameStatus } from './status-diff.js';
import { vmiOwner, vmiReferenceOf, type VmiNodeSide, type VmiSpecResult } from './vmi-source.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import { NetworkNotReadyError, type PodNetwork, type VmAttachment } from '../network/pod-network.js';

export interface RestartBackoff {
  /** First delay before restarting a stopped VM; doubles per restart (kubelet: 10 s). */
  initialMs: number;
  /** Cap (kubelet: 5 min). */
  maxMs: number;
  /** A run longer than this resets the backoff (kubelet: 10 min). */
  resetAfterMs: number;
}

export const DEFAULT_RESTART_BACKOFF: RestartBackoff = { initialMs: 10_000, maxMs: 300_000, resetAfterMs: 600_000 };

export interface PodControllerOptions {
  clients: KubeClients;
  nodeName: string;
  hostIP: () => string;
  launchers: LauncherSettings;
  /** Resolves the built-in images a pod refers to (building the test guest on first use). */
  builtinImages: (pod: V1Pod) => Promise<BuiltinImages>;
  /** Launcher pods of KubeVirt VMIs: their spec comes from the VMI, and the VMI gets this node's status. */
  vmis: VmiNodeSide;
  /** Addresses, namespaces and DHCP of the VMs' NICs. */
  network: PodNetwork;
  events: EventRecorder;
  restartBackoff?: RestartBackoff;
  /** Concurrent pod syncs; one pod never syncs twice at once. */
  workers?: number;
  metrics: AgentMetrics;
  log: Logger;
}

/** What went wrong before a VM could run, kept per pod UID for status and retries. */
interface PodProblems {
  invalid?: { reason: 'InvalidVMSpec'; message: string };
  imageError?: { reason: 'ErrImagePull' | 'ImagePullBackOff'; message: string };
  imagePullFailures: number;
  /** VMI fields the VM runs without (reported as an event and a VMI condition). */
  unsupported: string[];
  /** A VMI's launcher pod: whether the VMI asks for its vCPUs paused; undefined for plain pods. */
  wantPaused?: boolean;
  /** A VMI's launcher pod: the VMI, for events about it. */
  vmiRef?: V1ObjectReference;
  /** A VMI's launcher pod: VmSpec paths of causes found at start renamed to the VMI's fields. */
  atKubevirtFields?: VmiSpecResult['atKubevirtFields'];
  /** No new pull before this time (ImagePullBackOff), however often the pod changes. */
  imageRetryAtMs?: number;
  preparing: boolean;
  backoffUntilMs?: number;
  backoffDelayMs?: number;
  specHash?: string;
  /** Where the VM sits on the pod network, once attached. */
  attachment?: VmAttachment;
}

type Record = PodVmRecord & PodProblems;

const TERMINAL = new Set(['Succeeded', 'Failed']);
const ORPHAN_SWEEP_MS = 30_000;
/** How soon a VM waiting for the node's pod range tries again. */
const NETWORK_RETRY_MS = 1_000;

function specHash(spec: VmSpec): string {
  return createHash('sha256').update(JSON.stringify(spec)).digest('hex');
}

/** A missing boot image is an image pull failure (retried), not an invalid pod. */
function imageNotFound(err: SpecError): boolean {
  return err.causes.some((c) => c.reason === 'FieldValueNotFound' && (c.path.startsWith('disks[') || c.path.startsWith('kernelBoot')));
}

function gracePeriodS(pod: V1Pod): number {
  return pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
}

export class PodController {
  readonly registry: LauncherRegistry;
  private readonly informer: ClusterInformer<V1Pod>;
  private readonly podSync: KeyQueue;
  private readonly statusSync: KeyQueue;
  private readonly records = new Map<string, Record>();
  /** Pod deletions under way, by pod UID. */
  private readonly deletions = new Map<string, Promise<void>>();
  private readonly backoff: RestartBackoff;
  private started = false;
  private sweeping: Promise<void> | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;

  constructor(private readonly o: PodControllerOptions) {
    this.backoff = o.restartBackoff ?? DEFAULT_RESTART_BACKOFF;
    const log = o.log;
    this.podSync = new KeyQueue((key) => this.measuredSyncPod(key), { name: 'syncPodsFromKubernetes', workers: o.workers ?? 8, log });
    this.statusSync = new KeyQueue((key) => this.syncStatus(key), { name: 'syncStatusFromLauncher', workers: 4, log });
    this.registry = new LauncherRegistry(o.launchers, (uid) => this.onLauncherChange(uid), log.child({ component: 'launchers' }));
    this.informer = createPodInformer(o.clients, o.nodeName, (key) => this.onPodEvent(key), log.child({ component: 'pod-informer' }));
  }

  /** Re-attach launchers, sync the pod list, remove VMs of pods that are gone, then start working. */
  async start(): Promise<void> {
    await this.registry.prepare();
    const found = await this.registry.discover();
    await this.informer.start();
    this.o.vmis.onChange((vmi) => this.onVmi(vmi));
    for (const pod of this.informer.list()) if (found.includes(pod.metadata?.uid ?? '')) this.recordFor(pod);
    await this.o.network.ensureNode().catch((err: unknown) => this.o.log.warn({ err }, 'pod network not ready yet; will retry'));
    await this.removeOrphans();
    this.started = true;
    this.o.vmis.follow(this.informer.list());
    for (const pod of this.informer.list()) this.onPodKey(keyOfObject(pod));
    this.sweepTimer = setInterval(() => void this.sweep(), ORPHAN_SWEEP_MS);
    this.o.log.info({ pods: this.informer.list().length, reattached: found.length }, 'pod controller started');
  }

  /**
   * VMs whose pod UID is not in the synced pod cache: the pod was deleted
   * while the agent was down or before its key was ever synced. Only called
   * with a synced cache, so a missing UID really is gone.
   */
  private async removeOrphans(): Promise<void> {
    const podUIDs = new Set(this.informer.list().map((p) => p.metadata?.uid));
    for (const uid of this.registry.uids()) {
      if (podUIDs.has(uid)) continue;
      this.o.log.info({ vm: uid }, 'removing the VM of a pod that no longer exists');
      await this.removeVm(uid, 0).catch((err: unknown) => this.o.log.error({ err, vm: uid }, 'could not remove an orphaned VM; will retry'));
    }
    // Networks of VMs removed while the agent was down, or of pods deleted before their VM started.
    const inUse = (uid: string) => !!this.registry.get(uid) || this.records.has(uid) || this.informer.list().some((p) => p.metadata?.uid === uid);
    await this.o.network.retainOnly(inUse).catch((err: unknown) => this.o.log.error({ err }, 'could not remove orphaned VM networks; will retry'));
  }

  /** Periodic repair: launchers that were unreachable at start-up, and orphans no event pointed at. */
  private sweep(): Promise<void> {
    if (this.sweeping || !this.started) return this.sweeping ?? Promise.resolve();
    this.sweeping = this.sweepOnce().finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<void> {
    try {
      await this.registry.discover();
      await this.removeOrphans();
    } catch (err) {
      this.o.log.warn({ err }, 'orphan sweep failed');
    }
    // Also repairs the bridge, NAT rules and DHCP server if something removed them.
    await this.o.network.ensureNode().catch((err: unknown) => this.o.log.warn({ err }, 'pod network repair failed'));
  }

  /**
   * Stops the controller. VMs keep running under their launchers unless
   * `stopVms`: then they are shut down, after the queues stopped, so nothing
   * restarts them meanwhile (their directories stay for the next start).
   */
  async stop(opts: { stopVms?: boolean; gracePeriodS?: number } = {}): Promise<void> {
    this.started = false;
    clearInterval(this.sweepTimer);
    await this.sweeping;
    this.podSync.stop();
    this.statusSync.stop();
    await Promise.all([this.informer.stop(), this.o.vmis.stop()]);
    if (opts.stopVms) {
      await Promise.all(this.registry.uids().map((uid) => this.registry.stop(uid, opts.gracePeriodS ?? 30)));
      // Their VMs are down now; what is left of them is quick. Otherwise they end with the process, and the next agent resumes them.
      await Promise.all(this.deletions.values());
    }
    this.registry.close();
  }

  pods(): readonly V1Pod[] {
    return this.informer.list();
  }

  pod(key: string): V1Pod | undefined {
    return this.informer.get(key);
  }

  /** A pod bound to this node was added, changed or deleted: the VMIs followed are those of the pods now bound. */
  private onPodEvent(key: string): void {
    if (this.started) this.o.vmis.follow(this.informer.list());
    this.onPodKey(key);
  }

  private onPodKey(key: string): void {
    if (!this.started) return;
    this.podSync.add(key);
    this.statusSync.add(key);
  }

  /** A VMI on this node changed (its spec, its paused annotation): its launcher pod syncs again. */
  private onVmi(vmi: VirtualMachineInstance): void {
    for (const pod of this.informer.list()) if (vmiOwner(pod)?.uid === vmi.metadata.uid) this.onPodKey(keyOfObject(pod));
  }

  private onLauncherChange(uid: string): void {
    const running = this.registry.uids().filter((u) => {
      const v = this.registry.get(u);
      return v?.live && (v.state.phase === 'Running' || v.state.phase === 'Paused');
    });
    this.o.metrics.vmsRunning.set(running.length);
    const rec = this.records.get(uid);
    if (rec) this.onPodKey(rec.key);
  }

  private recordFor(pod: V1Pod): Record {
    const uid = pod.metadata!.uid!;
    let rec = this.records.get(uid);
    if (!rec) {
      // After an agent restart the pod status is the only memory of earlier runs.
      const cs = pod.status?.containerStatuses?.[0];
      const last = cs?.lastState?.terminated;
      rec = {
        uid,
        key: keyOfObject(pod),
        restartCount: cs?.restartCount ?? 0,
        ...(last?.finishedAt
          ? { lastTermination: { reason: last.reason ?? 'Error', exitCode: last.exitCode, finishedAt: last.finishedAt, ...(last.startedAt ? { startedAt: last.startedAt } : {}) } }
          : {}),
        imagePullFailures: 0,
        unsupported: [],
        preparing: false,
        ...(cs?.state?.terminated?.finishedAt ? { stoppedSeenAt: cs.state.terminated.finishedAt } : {}),
      };
      this.records.set(uid, rec);
    }
    return rec;
  }

  // ---- syncPodsFromKubernetes -------------------------------------------------

  private async measuredSyncPod(key: string): Promise<void> {
    const end = this.o.metrics.podSyncDuration.startTimer();
    try {
      await this.syncPod(key);
      this.o.metrics.podSyncs.inc({ result: 'success' });
      end({ result: 'success' });
    } catch (err) {
      this.o.metrics.podSyncs.inc({ result: 'error' });
      end({ result: 'error' });
      throw err;
    }
  }

  private async syncPod(key: string): Promise<void> {
    const pod = this.informer.get(key);
    // A VM under this key whose pod is gone, or was replaced by a new pod of the same name.
    for (const rec of [...this.records.values()]) {
      if (rec.key === key && rec.uid !== pod?.metadata?.uid) await this.removeVm(rec.uid, 0);
    }
    if (!pod?.metadata?.uid) return;
    const uid = pod.metadata.uid;
    const rec = this.recordFor(pod);
    if (pod.metadata.deletionTimestamp) return this.startDeletion(pod, rec);

    const view = this.registry.get(uid);
    // A kubelet never restarts a pod it reported as finished, and tears its network down.
    if (TERMINAL.has(pod.status?.phase ?? '') && !view?.live) return this.o.network.detach(uid);

    const translated = await this.specFor(pod, rec);
    if (translated === 'gone') return;
    const spec = translated instanceof SpecError ? translated : await this.attachNetwork(pod, rec, translated);
    if (spec === 'waiting') return;
    if (spec instanceof SpecError) {
      if (!rec.invalid) this.reportInvalid(pod, spec.message);
      rec.invalid = { reason: 'InvalidVMSpec', message: spec.message };
      this.statusSync.add(key);
      return;
    }
    delete rec.invalid;

    if (view && !vmStopped(view) && view.live) {
      await this.keepInSync(pod, rec, view.client, spec);
      return this.reconcilePause(rec, view);
    }
    if (!view && rec.imageRetryAtMs !== undefined && Date.now() < rec.imageRetryAtMs) {
      this.podSync.addAfter(key, rec.imageRetryAtMs - Date.now());
      return;
    }
    if (view && vmStopped(view)) {
      rec.stoppedSeenAt ??= new Date();
      // The guest powered off or crashed: the launcher has nothing left to run. Stopping it frees its
      // libvirt daemon and cgroup; its last word (the VM's end) stays in its state file.
      if (view.live) await this.registry.stop(uid, 0);
      const ended = this.registry.get(uid);
      if (!ended) return;
      if (!this.restartAllowed(pod, ended)) return this.statusSync.add(key);
      if (!this.backoffOver(pod, rec, ended)) return;
      rec.restartCount++;
      delete rec.backoffUntilMs;
      delete rec.stoppedSeenAt;
      this.registry.forget(uid);
    }
    await this.startVm(pod, rec, spec);
  }

  /** An event naming the invalid fields, on the pod and, for a launcher pod, on its VMI (where KubeVirt users look). */
  private reportInvalid(pod: V1Pod, message: string): void {
    this.o.events.record(pod, 'Warning', 'Failed', `cannot run this pod as a VM: ${message}`);
    const vmi = vmiReferenceOf(pod);
    if (vmi) this.o.events.recordFor(vmi, 'Warning', 'SyncFailed', message);
  }

  /** The VmSpec a pod asks for: from the pod itself, or from its VMI ('gone' when the VMI was deleted). */
  private async specFor(pod: V1Pod, rec: Record): Promise<VmSpec | SpecError | 'gone'> {
    if (!vmiOwner(pod)) return translatePod(pod, await this.o.builtinImages(pod));
    const result = await this.o.vmis.specFor(pod);
    if (result === 'gone' || result instanceof SpecError) return result;
    if (result.unsupported.join() !== rec.unsupported.join()) {
      this.o.events.recordFor(result.vmi, 'Warning', 'UnsupportedFields', `vkvm does not realize these VMI fields; the VM runs without them: ${result.unsupported.join(', ')}`);
    }
    rec.unsupported = result.unsupported;
    rec.wantPaused = result.paused;
    rec.vmiRef = result.vmi;
    rec.atKubevirtFields = result.atKubevirtFields;
    return result.spec;
  }

  /**
   * Pauses or resumes a VMI's running VM as its annotation asks, whenever the
   * two differ. Resumes only what a pause made (reason Paused): a VM libvirt
   * paused on an I/O error stays paused.
   */
  private async reconcilePause(rec: Record, view: Extract<LauncherView, { live: true }>): Promise<void> {
    if (rec.wantPaused === undefined || !rec.vmiRef) return;
    const s = view.state;
    if (rec.wantPaused && s.phase === 'Running' && s.reason !== 'ShuttingDown') {
      await view.client.pause();
      this.o.events.recordFor(rec.vmiRef, 'Normal', 'Paused', 'VirtualMachineInstance paused');
    } else if (!rec.wantPaused && s.phase === 'Paused' && s.reason === 'Paused') {
      await view.client.unpause();
      this.o.events.recordFor(rec.vmiRef, 'Normal', 'Unpaused', 'VirtualMachineInstance unpaused');
    }
  }

  /**
   * Leases the VM's address and builds its network namespace (idempotent, so
   * every sync repairs it); the spec comes back with its NIC on the VM's tap.
   */
  private async attachNetwork(pod: V1Pod, rec: Record, spec: VmSpec): Promise<VmSpec | SpecError | 'waiting'> {
    try {
      const t0 = performance.now();
      const { spec: wired, attachment } = await this.o.network.attach(spec);
      const changed = attachment?.podIP !== rec.attachment?.podIP;
      if (attachment) rec.attachment = attachment;
      else delete rec.attachment;
      if (changed && attachment) {
        this.o.log.info({ pod: rec.key, uid: rec.uid, podIP: attachment.podIP, ms: Math.round(performance.now() - t0) }, 'VM network attached');
        // The pod address shows as soon as it is leased, before the VM boots.
        this.statusSync.add(rec.key);
      }
      return wired;
    } catch (err) {
      if (err instanceof SpecError) return err;
      if (!(err instanceof NetworkNotReadyError)) {
        // The kubelet's reason when CNI fails; retried with the queue's back-off.
        this.o.events.record(pod, 'Warning', 'FailedCreatePodSandBox', `Failed to set up the VM's pod network: ${(err as Error).message}`);
        throw err;
      }
      this.podSync.addAfter(rec.key, NETWORK_RETRY_MS * (1 + Math.random()));
      return 'waiting';
    }
  }

  private async keepInSync(pod: V1Pod, rec: Record, client: { syncVm(spec: VmSpec): Promise<unknown> }, spec: VmSpec): Promise<void> {
    const hash = specHash(spec);
    if (rec.specHash === hash) return;
    try {
      await client.syncVm(spec);
    } catch (err) {
      if (!(err instanceof PreconditionError)) throw err;
      // Pods are mostly immutable; a changed image or size takes effect only when the VM restarts.
      this.o.events.record(pod, 'Warning', 'SpecChangeIgnored', `${err.message}; delete and recreate the pod to apply it`);
    }
    rec.specHash = hash;
  }

  private restartAllowed(pod: V1Pod, view: NonNullable<ReturnType<LauncherRegistry['get']>>): boolean {
    const policy = pod.spec?.restartPolicy ?? 'Always';
    if (policy === 'Never') return false;
    if (policy === 'OnFailure') return observeVm(view, this.recordFor(pod))?.phase === 'Failed';
    return true;
  }

  /** Enters or waits out the restart backoff; true when the VM may start again now. */
  private backoffOver(pod: V1Pod, rec: Record, view: NonNullable<ReturnType<LauncherRegistry['get']>>): boolean {
    const now = Date.now();
    if (rec.backoffUntilMs === undefined) {
      const obs = observeVm(view, rec);
      const ranMs = obs?.startedAt && obs.finishedAt ? obs.finishedAt.getTime() - obs.startedAt.getTime() : 0;
      const exponent = ranMs > this.backoff.resetAfterMs ? 0 : rec.restartCount;
      const delayMs = Math.min(this.backoff.initialMs * 2 ** exponent, this.backoff.maxMs);
      rec.backoffUntilMs = now + delayMs;
      rec.backoffDelayMs = delayMs;
      rec.lastTermination = {
        reason: obs?.phase === 'Succeeded' ? 'Completed' : 'Error',
        exitCode: obs?.phase === 'Succeeded' ? 0 : 1,
        finishedAt: obs?.finishedAt ?? new Date(now),
        ...(obs?.startedAt ? { startedAt: obs.startedAt } : {}),
      };
      this.o.events.record(pod, 'Warning', 'BackOff', `Back-off ${Math.round(delayMs / 1000)}s restarting stopped VM (${obs?.reason ?? 'stopped'})`);
    }
    this.statusSync.add(rec.key);
    const remainingMs = rec.backoffUntilMs - now;
    if (remainingMs <= 0) return true;
    this.podSync.addAfter(rec.key, remainingMs);
    return false;
  }

  private async startVm(pod: V1Pod, rec: Record, spec: VmSpec): Promise<void> {
    const image = pod.spec?.containers?.[0]?.image ?? '';
    const log = this.o.log.child({ pod: rec.key, uid: rec.uid });
    rec.preparing = true;
    this.statusSync.add(rec.key);
    this.o.events.record(pod, 'Normal', 'Pulling', `Preparing boot image "${image}"`);
    const t0 = performance.now();
    try {
      const live = await this.registry.start(rec.uid, rec.attachment ? { netns: rec.attachment.netnsPath } : {}).then(
        (l) => {
          this.o.metrics.launcherStarts.inc({ result: 'success' });
          return l;
        },
        (err: unknown) => {
          this.o.metrics.launcherStarts.inc({ result: 'error' });
          throw err;
        },
      );
      const { state } = await live.client.syncVm(spec);
      rec.specHash = specHash(spec);
      delete rec.imageError;
      delete rec.imageRetryAtMs;
      rec.imagePullFailures = 0;
      const ms = Math.round(performance.now() - t0);
      log.info({ ms, qemuPid: state.qemuPid, restartCount: rec.restartCount }, 'VM started');
      this.o.events.record(pod, 'Normal', 'Pulled', `Boot image "${image}" is ready`);
      this.o.events.record(pod, 'Normal', 'Created', `Created VM ${state.domainUuid}`);
      this.o.events.record(pod, 'Normal', 'Started', `Started VM (QEMU pid ${state.qemuPid}) in ${ms} ms`);
    } catch (thrown) {
      // Nothing of a failed start stays behind: no launcher, no QEMU, no overlay.
      await this.registry.stop(rec.uid, 0);
      await this.registry.remove(rec.uid);
      const imageMissing = thrown instanceof SpecError && imageNotFound(thrown);
      // A VMI's user knows its fields, not the VmSpec's.
      const err = thrown instanceof SpecError && rec.atKubevirtFields ? new SpecError(rec.atKubevirtFields(thrown.causes), { cause: thrown }) : thrown;
      if (err instanceof SpecError && imageMissing) {
        rec.imagePullFailures++;
        rec.imageError = { reason: rec.imagePullFailures > 1 ? 'ImagePullBackOff' : 'ErrImagePull', message: err.message };
        this.o.events.record(pod, 'Warning', 'Failed', `Failed to prepare boot image "${image}": ${err.message}`);
        const retryMs = Math.min(this.backoff.initialMs * 2 ** (rec.imagePullFailures - 1), this.backoff.maxMs);
        rec.imageRetryAtMs = Date.now() + retryMs;
        this.podSync.addAfter(rec.key, retryMs);
        return;
      }
      if (err instanceof SpecError) {
        rec.invalid = { reason: 'InvalidVMSpec', message: err.message };
        this.reportInvalid(pod, err.message);
        return;
      }
      this.o.events.record(pod, 'Warning', 'Failed', `Failed to start VM: ${(err as Error).message}`);
      throw err;
    } finally {
      rec.preparing = false;
      this.statusSync.add(rec.key);
    }
  }

  /**
   * Deletions run beside the queue, one per VM, as the kubelet gives each pod
   * its own worker: a guest taking its whole grace period must not hold a sync
   * worker (eight such would stall every start), nor the pod's key, so a force
   * delete meanwhile is synced at once and kills the VM.
   */
  private startDeletion(pod: V1Pod, rec: Record): void {
    if (this.deletions.has(rec.uid)) return;
    const deletion = this.finalizeDeletion(pod, rec)
      .then(() => this.podSync.forget(rec.key))
      .catch((err: unknown) => this.podSync.retryLater(rec.key, err))
      .finally(() => this.deletions.delete(rec.uid));
    this.deletions.set(rec.uid, deletion);
  }

  /** Graceful deletion: stop the VM within the grace period, remove everything, then release the pod object. */
  private async finalizeDeletion(pod: V1Pod, rec: Record): Promise<void> {
    const view = this.registry.get(rec.uid);
    if (view?.live && !vmStopped(view)) {
      const grace = gracePeriodS(pod);
      this.o.events.record(pod, 'Normal', 'Killing', `Stopping VM (grace period ${grace}s)`);
    }
    await this.removeVm(rec.uid, gracePeriodS(pod));
    const { name, namespace } = pod.metadata!;
    try {
      // The UID precondition: never delete a newer pod that took this name meanwhile.
      await this.o.clients.core.deleteNamespacedPod({ name: name!, namespace: namespace!, body: { gracePeriodSeconds: 0, preconditions: { uid: rec.uid } } });
      this.o.log.info({ pod: rec.key, uid: rec.uid }, 'pod deleted after its VM stopped');
    } catch (err) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
  }

  private async removeVm(uid: string, graceS: number): Promise<void> {
    await this.registry.stop(uid, graceS);
    await this.registry.remove(uid);
    await this.o.network.detach(uid);
    this.records.delete(uid);
  }

  // ---- syncStatusFromLauncher -------------------------------------------------

  private async syncStatus(key: string): Promise<void> {
    const pod = this.informer.get(key);
    const uid = pod?.metadata?.uid;
    if (!pod || !uid) return;
    // A finished pod's status is final: the API server refuses to move it back, and nothing here changes it.
    if (TERMINAL.has(pod.status?.phase ?? '')) return;
    const rec = this.records.get(uid);
    if (!rec) return;
    const view = this.registry.get(uid);
    const vm = observeVm(view, rec);
    // One snapshot for the VMI and the pod: the pod sync runs beside this one and may record a problem
    // meanwhile; a pod written Failed from a later look than its VMI would leave the VMI without it.
    const { invalid, imageError, preparing, attachment, unsupported } = rec;
    const input: PodStatusInput = { pod, now: new Date(), hostIP: this.o.hostIP(), preparing };
    if (attachment) input.podIP = attachment.podIP;
    if (vm) input.vm = vm;
    if (invalid) input.invalid = invalid;
    if (imageError) input.imageError = imageError;
    if (rec.backoffUntilMs !== undefined && vmStopped(view)) {
      input.backoff = { message: `back-off ${Math.round((rec.backoffDelayMs ?? 0) / 1000)}s restarting stopped VM` };
    }
    if (vmiOwner(pod)) {
      // While a start is under way its launcher's word is not the VMI's: a failed start (its launcher says
      // Failed/StartFailed, then exits) is reported by the start itself (ErrImagePull, InvalidVMSpec, a retry).
      const settled = preparing ? undefined : vm;
      await this.o.vmis.syncStatus(pod, settled, { ...(invalid ? { invalid } : {}), ...(imageError ? { imageError } : {}) }, unsupported, attachment);
    }
    const status = derivePodStatus(input);
    if (sameStatus(pod.status, status)) return;
    await this.writeStatus(pod, uid, status);
  }

  private async writeStatus(pod: V1Pod, uid: string, status: V1PodStatus): Promise<void> {
    const body = podStatusPatch(uid, status);
    try {
      await this.o.clients.core.patchNamespacedPodStatus({ name: pod.metadata!.name!, namespace: pod.metadata!.namespace!, body }, strategicMerge);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
  }
}
