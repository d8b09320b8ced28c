// The one writer of pod status and of the VMI status this node owns, as
// kubelet's status_manager.go: both derived (status.ts, vmi-status.ts) from
// one look at the pod's lifecycle, launcher and readiness probe; a pod status written only
// when it differs from what the pod holds, as far as this node knows (its
// last write, until the informer's copy moves past the version it was
// written over); every patch conditional on the object's UID.
import type { V1Pod, V1PodStatus } from '@kubernetes/client-node';
import type { Accelerator } from '../../vmm/probe/virtualization.js';
import type { Clock } from '../clock.js';
import type { EventRecorder } from '../kube/events.js';
import type { Logger } from '../log.js';
import { liveMigratability } from '../kubevirt/migratable.js';
import { isNotFound } from '../kube/errors.js';
import { statusPatch } from '../kube/status-patch.js';
import type { LauncherView } from '../launchers/registry.js';
import type { ImageBackOff, LifecycleState, PodLifecycle, StartBackOff } from './lifecycle.js';
import { observeVm } from './observe.js';
import { probedVmOf } from './probes/probed-vm.js';
import { Prober } from './probes/prober.js';
import { killUnhealthyVm } from './probes/unhealthy-vm.js';
import type { Launchers, VmControl } from '../launchers/registry.js';
import type { GuestAgent } from './probes/run-probe.js';
import type { VmNetwork } from './vm-runtime.js';
import type { PodApi } from './pod-api.js';
import { derivePodStatus, type PodStatusInput, type VmObservation } from './status.js';
import { podStatusPatch, sameStatus } from './status-diff.js';
import { speaksForVmi } from './migration-target.js';
import { launcherMigrationReport } from '../migration/conditions.js';
import { vmiOwner, type VmiSource } from './vmi-source.js';
import { NODE_VMI_STATUS_FIELDS, nodeVmiStatus } from './vmi-status.js';

const TERMINAL = new Set(['Succeeded', 'Failed']);

const NO_GUEST_AGENT: GuestAgent = {
  exec: () => Promise.reject(new Error('the VM has no launcher')),
  ping: () => Promise.reject(new Error('the VM has no launcher')),
};

export interface StatusWriterOptions {
  api: Pick<PodApi, 'patchPodStatus' | 'patchVmiStatus'>;
  vmis: Pick<VmiSource, 'read'>;
  hostIP: () => string;
  clock: Clock;
  /** The guest agent of a VM whose launcher runs, for exec and guestAgentPing probes (such probes fail without it). */
  guestAgent?: (uid: string) => GuestAgent | undefined;
  /** A VM's readiness changed: its status is to be written again. */
  onReadinessChange: (key: string) => void;
  events: Pick<EventRecorder, 'record'>;
  /** Where a VM whose liveness or startup probe failed is killed. */
  launchers: Pick<Launchers<VmControl>, 'get'>;
  log: Logger;
  /** The node's accelerator, which decides whether a VM without a CPU model can migrate (kubevirt/migratable.ts). */
  accelerator?: Accelerator;
  /** When the node's DHCP last served a VM's guest: a sign that it is up (guest-up.ts). */
  network: Pick<VmNetwork, 'guestDhcpAckedAt'>;
}

/** What a lifecycle state adds to the status: the trouble to show, a start under way, a back-off. */
type LifecycleFacts = Pick<PodStatusInput, 'invalid' | 'evicted' | 'imageError' | 'startError' | 'preparing' | 'backoff' | 'incoming'>;

/** The failure a back-off waits on, shown meanwhile and while its retry is under way. */
function failureOf(s: ImageBackOff | StartBackOff): Pick<LifecycleFacts, 'imageError' | 'startError'> {
  return s.kind === 'ImageBackOff' ? { imageError: s.error } : { startError: { message: s.message } };
}

function factsOf(s: LifecycleState): LifecycleFacts {
  switch (s.kind) {
    case 'Invalid':
      return { invalid: { reason: 'InvalidVMSpec', message: s.message } };
    case 'Evicted':
      return { evicted: { message: s.message, ...(s.reason ? { reason: s.reason } : {}) } };
    case 'ImageBackOff':
    case 'StartBackOff':
      return failureOf(s);
    case 'Preparing':
      return { preparing: true, ...(s.retrying ? failureOf(s.retrying) : {}) };
    case 'BackingOff':
      return { backoff: { message: `back-off ${Math.round(s.delayMs / 1000)}s restarting stopped VM` } };
    case 'Incoming':
      return { incoming: { prepared: s.prepared } };
    case 'Terminating':
      return factsOf(s.was);
    default:
      return {};
  }
}

export class StatusWriter {
  /** Per pod UID: the status last written, and the resourceVersion of the pod copy it was written over. */
  private readonly written = new Map<string, { status: V1PodStatus; over: string | undefined }>();

  /**
   * Runs the VMs' probes: readiness is their Ready (without one, whether the guest is up: guest-up.ts); a failed
   * liveness or startup probe kills the VM.
   */
  private readonly prober: Prober;

  constructor(private readonly o: StatusWriterOptions) {
    this.prober = new Prober({
      clock: o.clock,
      events: o.events,
      onReadinessChange: o.onReadinessChange,
      onFailure: (vm, kind, message) => void killUnhealthyVm(o, vm, kind, message),
      log: o.log,
    });
  }

  /** Stops the probes. */
  stop(): void {
    this.prober.stop();
  }

  /**
   * Writes the VMI's status (a launcher pod's), then the pod's, from the
   * lifecycle and launcher view given, taken once: the pod sync runs beside
   * this and moves the lifecycle on meanwhile, and a pod written Failed from a
   * later look than its VMI would leave the VMI without the cause (the pod,
   * then final, is never written again).
   */
  async sync(pod: V1Pod, lc: PodLifecycle, view: LauncherView<unknown> | undefined): Promise<void> {
    const current = this.current(pod);
    // A finished pod's status is final: the API server refuses to move it back, and nothing here changes it.
    if (TERMINAL.has(current?.phase ?? '')) return;
    const facts = factsOf(lc.state);
    const observed = observeVm(view, lc.history, view?.live ? await this.o.network.guestDhcpAckedAt(lc.uid) : undefined);
    const probed = probedVmOf(pod, lc, view, this.o.guestAgent?.(lc.uid) ?? NO_GUEST_AGENT);
    if (probed) this.prober.follow(probed);
    else this.prober.forget(lc.uid);
    const ready = this.prober.ready(lc.uid);
    const vm = observed && ready !== undefined ? { ...observed, guestReady: ready } : observed;
    if (vmiOwner(pod)) await this.syncVmi(pod, lc, facts, vm);
    const input: PodStatusInput = {
      pod: { ...pod, status: current },
      now: new Date(this.o.clock.now()),
      hostIP: this.o.hostIP(),
      ...facts,
    };
    if (lc.attachment) input.podIP = lc.attachment.podIP;
    if (lc.imageID) input.imageID = lc.imageID;
    if (vm) input.vm = vm;
    const migration = launcherMigrationReport(view);
    if (migration) input.migration = migration;
    const status = derivePodStatus(input);
    if (sameStatus(current, status)) return;
    const uid = lc.uid;
    try {
      await this.o.api.patchPodStatus(pod.metadata!.namespace!, pod.metadata!.name!, podStatusPatch(uid, status));
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    this.written.set(uid, { status, over: pod.metadata?.resourceVersion });
  }

  /** The pod is gone: its last write is of no use any more, nor its probe. */
  forget(uid: string): void {
    this.written.delete(uid);
    this.prober.forget(uid);
  }

  /** The status the pod holds as far as this node knows: its last write, while the informer's copy is still the one written over. */
  private current(pod: V1Pod): V1PodStatus | undefined {
    const last = this.written.get(pod.metadata?.uid ?? '');
    return last && last.over === pod.metadata?.resourceVersion ? last.status : pod.status;
  }

  /** The fields of the VMI status this node owns, written only when they change; earlier phases are the cluster controller's. */
  private async syncVmi(pod: V1Pod, lc: PodLifecycle, facts: LifecycleFacts, vm: VmObservation | undefined): Promise<void> {
    const vmi = await this.o.vmis.read(pod);
    if (!vmi || !speaksForVmi(pod, vmi, vm)) return;
    // While a start is under way its launcher's word is not the VMI's: a failed start (its launcher says
    // Failed/StartFailed, then exits) is reported by the start itself (ErrImagePull, InvalidVMSpec, a retry).
    const settled = facts.preparing ? undefined : vm;
    const next = nodeVmiStatus({
      current: vmi.status ?? {},
      nodeName: pod.spec?.nodeName ?? '',
      ...(settled ? { vm: settled } : {}),
      ...(facts.invalid ? { invalid: facts.invalid } : {}),
      ...(facts.evicted ? { evicted: facts.evicted } : {}),
      ...(facts.imageError ? { imageError: facts.imageError } : {}),
      ...(facts.startError ? { startError: facts.startError } : {}),
      ...(lc.attachment ? { attachment: lc.attachment } : {}),
      unsupported: lc.vmi?.unsupported ?? [],
      migratability: liveMigratability(vmi, this.o.accelerator),
      // Whole seconds, as Kubernetes writes times.
      now: new Date(Math.floor(this.o.clock.now() / 1000) * 1000),
    });
    const patch = statusPatch(vmi.status, next, NODE_VMI_STATUS_FIELDS);
    if (!patch) return;
    await this.o.api.patchVmiStatus(vmi.metadata.namespace!, vmi.metadata.name!, { metadata: { uid: vmi.metadata.uid }, status: patch });
  }
}
