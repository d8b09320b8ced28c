// What the pod controller does to a pod's VM, as kubelet's kuberuntime manager
// does to a pod's containers: work out the VmSpec it should run (from the pod
// or its VMI, wired to the pod network), start it, and keep a running one in
// line with its spec and its VMI's paused annotation. It decides nothing
// about the pod's lifecycle: it reports what happened (a lifecycle event, a
// thrown error) and records the Events of its own actions.
import { createHash } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import type { EventRecorder } from '../kube/events.js';
import type { LiveLauncher, Launchers, VmControl } from '../launchers/registry.js';
import type { Logger } from '../log.js';
import type { AgentMetrics } from '../metrics.js';
import { ChildCpuMeter } from '../child-cpu.js';
import { NetworkNotReadyError, type PodNetwork } from '../network/pod-network.js';
import { ImagePullError } from '../images/errors.js';
import type { PodVolumes } from '../csi-node/pod-volumes.js';
import type { VolumeImports } from '../csi-node/volume-import.js';
import type { PodImages, ResolvedSpec } from '../images/pod-images.js';
import type { UrlImagesInUse } from '../images/url-cache-gc.js';
import { PreconditionError } from '../../launcher/agent-api.js';
import { SpecError, type SpecCause } from '../../vmm/errors.js';
import { persistentVolumeDirs } from '../../vmm/host-files.js';
import type { VmSpec } from '../../vmm/spec.js';
import { podCpuRequestMillicores } from './fit.js';
import { disksOverLimit } from './ephemeral-storage.js';
import { guestDnsOf, type NodeDns } from './guest-dns.js';
import type { LifecycleEvent, PodLifecycle } from './lifecycle.js';
import { atPodFields, translatePod } from './translate.js';
import { vmiOwner, type VmiSource } from './vmi-source.js';

/** The pod network as the pod controller uses it (PodNetwork; a fake in unit tests). */
export type VmNetwork = Pick<PodNetwork, 'attach' | 'detach' | 'ensureNode' | 'retainOnly' | 'guestDhcpAckedAt' | 'onGuestDhcp'>;

export interface VmRuntimeOptions {
  launchers: Launchers<VmControl>;
  network: Pick<VmNetwork, 'attach'>;
  vmis: Pick<VmiSource, 'specFor'>;
  /** Pulls the registry images a VM needs before its launcher starts (provider/images/). */
  images: Pick<PodImages, 'resolve' | 'resolveRunning'>;
  /**
   * Downloads a URL image into the node's image cache (vmm/disks/base-image.ts), where the launcher
   * finds it; a refusal the user can fix is a SpecError at `at`.
   */
  downloadImage: (url: string, at: string, log: Logger, signal?: AbortSignal) => Promise<void>;
  /** Publishes a VMI's CSI volumes before its launcher starts (csi-node/pod-volumes.ts); a node without it refuses them. */
  volumes?: Pick<PodVolumes, 'publish'>;
  /** Imports a DataVolume's source into its published volume before the launcher starts (csi-node/volume-import.ts). */
  imports?: Pick<VolumeImports, 'ensure'>;
  /** Records what was learnt about the pod on the way to its spec: its VMI's context, its place on the network, its image. */
  /** Notes the URLs each pod's VM uses, which pins them in the image cache (url-cache-gc.ts). */
  urlImages?: Pick<UrlImagesInUse, 'note'>;
  learnt: (uid: string, context: Partial<Pick<PodLifecycle, 'vmi' | 'attachment' | 'imageID'>>) => void;
  events: EventRecorder;
  metrics: AgentMetrics;
  /** The cluster's DNS and the node's resolver, from which each guest's is formed (guest-dns.ts); the node's nameservers when absent. */
  dns?: () => NodeDns;
  /** Charges the host commands of a network attach to it; one of its own by default. */
  childCpu?: ChildCpuMeter;
  log: Logger;
}

/** The VM's network could not be set up (the node's disk full, a failing command): its start failed before its launcher. */
export class NetworkSetupError extends Error {
  readonly kind = 'NetworkSetup';
}

/** What a start came to; other failures are thrown. */
export type StartOutcome = Extract<LifecycleEvent, { type: 'started' | 'imageMissing' | 'invalid' }>;

/** A start's images in place, for its launcher: registry images' files in the store, URL images in the cache. */
export interface PreparedSpec {
  resolved: ResolvedSpec;
  /** The Pulling event is recorded already (a pull's, or a download's). */
  pullingRecorded: boolean;
}

/** What preparing a start came to: the spec ready for its launcher, or an outcome that ends the attempt. */
export type Prepared = ({ type: 'prepared' } & PreparedSpec) | Extract<StartOutcome, { type: 'imageMissing' | 'invalid' }>;

/** Whether a start has anything to do before its launcher starts: a registry image or a URL to fetch, CSI volumes to publish. */
export function needsPreparation(spec: VmSpec, lc?: Pick<PodLifecycle, 'vmi'>): boolean {
  if (lc?.vmi?.csiVolumes.length) return true;
  return !!spec.kernelBoot?.container || spec.disks.some((d) => d.source.kind === 'registry' || d.source.kind === 'url');
}

const imageOf = (pod: V1Pod): string => pod.spec?.containers?.[0]?.image ?? '';

export function specHash(spec: VmSpec): string {
  return createHash('sha256').update(JSON.stringify(spec)).digest('hex');
}

/** A missing boot image is an image pull failure (retried), not an invalid pod. */
function imageNotFound(err: SpecError): boolean {
  return err.causes.some((c) => c.reason === 'FieldValueNotFound' && (c.path.startsWith('disks[') || c.path.startsWith('kernelBoot')));
}

export class VmRuntime {
  /** The host commands' CPU of each VM's first network attach (ms), until its start is counted. */
  private readonly attachCpuMs = new Map<string, number>();
  private readonly childCpu: ChildCpuMeter;

  constructor(private readonly o: VmRuntimeOptions) {
    this.childCpu = o.childCpu ?? new ChildCpuMeter();
  }

  /** The pod's VM is gone: nothing of it is kept. */
  forget(uid: string): void {
    this.attachCpuMs.delete(uid);
  }

  /**
   * The VmSpec the pod asks for, its NIC on the VM's tap: 'gone' when its
   * VMI was deleted, 'waiting' while the node has no pod range (NetworkNotReadyError).
   */
  async desiredSpec(pod: V1Pod, lc: PodLifecycle): Promise<VmSpec | SpecError | 'gone' | 'waiting'> {
    const found = await this.specFor(pod, lc);
    if (found === 'gone' || found instanceof SpecError) return found;
    const { spec, atUserFields } = found;
    this.o.urlImages?.note(lc.uid, spec);
    // Checked before the pod gets anything of the node: an address, a network, a disk.
    const field = vmiOwner(pod)
      ? 'spec.domain.resources.limits.ephemeral-storage'
      : 'spec.containers[0].resources.limits.ephemeral-storage';
    const overLimit = disksOverLimit(pod, spec, field);
    if (overLimit) return overLimit;
    const attached = await this.attachNetwork(pod, lc, spec);
    // What the network refuses (a MAC another VM holds) is reported at the user's fields, as what a start finds.
    return attached instanceof SpecError ? new SpecError(atUserFields(attached.causes), { cause: attached }) : attached;
  }

  /** The spec with the pod's CPU request, and how to name its fields as the pod or VMI does. */
  private async specFor(
    pod: V1Pod,
    lc: PodLifecycle,
  ): Promise<{ spec: VmSpec; atUserFields: (causes: SpecCause[]) => SpecCause[] } | SpecError | 'gone'> {
    const found = await this.translated(pod, lc);
    if (found === 'gone' || found instanceof SpecError) return found;
    // The pod's, not the VMI's: the launcher pod's request is what the scheduler accounted on this node.
    return { ...found, spec: { ...found.spec, cpu: { ...found.spec.cpu, requestMillicores: podCpuRequestMillicores(pod) } } };
  }

  private async translated(
    pod: V1Pod,
    lc: PodLifecycle,
  ): Promise<{ spec: VmSpec; atUserFields: (causes: SpecCause[]) => SpecCause[] } | SpecError | 'gone'> {
    if (!vmiOwner(pod)) {
      const spec = translatePod(pod);
      return spec instanceof SpecError ? spec : { spec, atUserFields: atPodFields(spec) };
    }
    const result = await this.o.vmis.specFor(pod);
    if (result === 'gone' || result instanceof SpecError) return result;
    const { spec, ...vmi } = result;
    if (vmi.unsupported.join() !== (lc.vmi?.unsupported ?? []).join()) {
      this.o.events.recordFor(
        vmi.ref,
        'Warning',
        'UnsupportedFields',
        `vkvm does not realize these VMI fields; the VM runs without them: ${vmi.unsupported.join(', ')}`,
      );
    }
    this.o.learnt(lc.uid, { vmi });
    return { spec, atUserFields: (causes) => vmi.atKubevirtFields(causes) };
  }

  /** Leases the VM's address and builds its network namespace (idempotent, so every sync repairs it). */
  private async attachNetwork(pod: V1Pod, lc: PodLifecycle, spec: VmSpec): Promise<VmSpec | SpecError | 'waiting'> {
    let cpuMs = 0;
    try {
      const t0 = performance.now();
      const endCpu = this.childCpu.begin();
      const guest = this.o.dns ? guestDnsOf(pod, this.o.dns()) : undefined;
      const { spec: wired, attachment } = await this.o.network.attach(spec, guest?.dns).finally(() => (cpuMs = endCpu()));
      if (attachment && attachment.podIP !== lc.attachment?.podIP) {
        for (const w of guest?.warnings ?? []) this.o.events.record(pod, 'Warning', w.reason, w.message);
        this.attachCpuMs.set(lc.uid, cpuMs);
        this.o.log.info(
          { pod: lc.key, uid: lc.uid, podIP: attachment.podIP, ms: Math.round(performance.now() - t0), cpuMs: Math.round(cpuMs) },
          'VM network attached',
        );
      }
      this.o.learnt(lc.uid, { attachment });
      return wired;
    } catch (err) {
      if (err instanceof SpecError) return err;
      if (err instanceof NetworkNotReadyError) return 'waiting';
      // The kubelet's reason when CNI fails; the pod controller retries it as a failed start.
      const failed = new NetworkSetupError(`Failed to set up the VM's pod network: ${(err as Error).message}`, { cause: err });
      this.o.events.record(pod, 'Warning', 'FailedCreatePodSandBox', failed.message);
      throw failed;
    }
  }

  /**
   * The slow part of a start, run off the sync workers (preparations.ts):
   * CSI volumes staged and published (a driver not registered is a failed
   * start naming it, retried with back-off), registry images pulled into the
   * store, URL images downloaded into the node's image cache (where the
   * launcher then finds them). A missing image and an invalid spec are
   * outcomes; other failures are thrown.
   */
  async prepare(pod: V1Pod, lc: PodLifecycle, spec: VmSpec, signal?: AbortSignal): Promise<Prepared> {
    const log = this.o.log.child({ pod: lc.key, uid: lc.uid });
    try {
      const csi = lc.vmi?.csiVolumes ?? [];
      if (csi.length && !this.o.volumes) throw new Error('this node agent publishes no CSI volumes');
      if (csi.length) await this.o.volumes!.publish(lc.uid, csi, signal);
      if (lc.vmi?.csiClaims?.length && this.o.imports) await this.o.imports.ensure(pod, lc.vmi.csiClaims, signal);
      // Registry images are pulled with the kubelet's events; the launcher gets their files in the store.
      const resolved = await this.o.images.resolve(pod, spec, log);
      if (resolved.imageID) this.o.learnt(lc.uid, { imageID: resolved.imageID });
      const urls = spec.disks.flatMap((d, i) => (d.source.kind === 'url' ? [{ url: d.source.url, at: `disks[${i}].source.url` }] : []));
      if (urls.length) this.o.events.record(pod, 'Normal', 'Pulling', `Preparing boot image "${imageOf(pod)}"`);
      for (const { url, at } of urls) await this.o.downloadImage(url, at, log, signal);
      return { type: 'prepared', resolved, pullingRecorded: resolved.fromRegistry || urls.length > 0 };
    } catch (thrown) {
      return this.failedStart(pod, lc, spec, thrown);
    }
  }

  /**
   * Starts the pod's VM from its prepared spec: its launcher, then the
   * launcher's idempotent sync. Nothing of a failed start stays behind (no
   * launcher, no QEMU, no overlay); a missing image and an invalid spec are
   * outcomes, other failures are thrown.
   */
  async start(pod: V1Pod, lc: PodLifecycle, spec: VmSpec, prepared: PreparedSpec): Promise<StartOutcome> {
    const image = imageOf(pod);
    const { resolved } = prepared;
    const t0 = performance.now();
    try {
      if (!prepared.pullingRecorded) this.o.events.record(pod, 'Normal', 'Pulling', `Preparing boot image "${image}"`);
      const volumeDirs = persistentVolumeDirs(resolved.spec);
      const live = await this.o.launchers.start(lc.uid, { ...(lc.attachment ? { netns: lc.attachment.netnsPath } : {}), volumeDirs }).then(
        (l) => {
          this.o.metrics.launcherStarts.inc({ result: 'success' });
          return l;
        },
        (err: unknown) => {
          this.o.metrics.launcherStarts.inc({ result: 'error' });
          throw err;
        },
      );
      const { state } = await live.client.syncVm(resolved.spec);
      const ms = Math.round(performance.now() - t0);
      const cpuMs = Math.round((await this.o.launchers.cpuMs(lc.uid)) + (this.attachCpuMs.get(lc.uid) ?? 0));
      this.attachCpuMs.delete(lc.uid);
      this.o.metrics.cpuMsPerVmStart.observe(cpuMs);
      this.o.log.info({ pod: lc.key, uid: lc.uid, ms, cpuMs, qemuPid: state.qemuPid, restartCount: lc.history.restartCount }, 'VM started');
      if (!resolved.fromRegistry) this.o.events.record(pod, 'Normal', 'Pulled', `Boot image "${image}" is ready`);
      this.o.events.record(pod, 'Normal', 'Created', `Created VM ${state.domainUuid}`);
      this.o.events.record(pod, 'Normal', 'Started', `Started VM (QEMU pid ${state.qemuPid}) in ${ms} ms`);
      return { type: 'started', specHash: specHash(spec) };
    } catch (thrown) {
      await this.o.launchers.stop(lc.uid, 0);
      await this.o.launchers.remove(lc.uid);
      return this.failedStart(pod, lc, spec, thrown);
    }
  }

  /** What a failed start or preparation comes to: a missing image, an invalid spec at the user's fields, or the error thrown on. */
  private failedStart(
    pod: V1Pod,
    lc: PodLifecycle,
    spec: VmSpec,
    thrown: unknown,
  ): Extract<StartOutcome, { type: 'imageMissing' | 'invalid' }> {
    if (thrown instanceof ImagePullError) return { type: 'imageMissing', reason: thrown.reason, message: thrown.message };
    if (!(thrown instanceof SpecError)) {
      this.o.events.record(pod, 'Warning', 'Failed', `Failed to start VM: ${(thrown as Error).message}`);
      throw thrown;
    }
    // Users know their pod's or VMI's fields, not the VmSpec's.
    const err = new SpecError(lc.vmi ? lc.vmi.atKubevirtFields(thrown.causes) : atPodFields(spec)(thrown.causes), { cause: thrown });
    return imageNotFound(thrown)
      ? { type: 'imageMissing', message: `Failed to prepare boot image "${imageOf(pod)}": ${err.message}` }
      : { type: 'invalid', message: err.message, found: 'start' };
  }

  /** Syncs a running VM's spec when it changed since the last sync; returns the hash of the spec synced. */
  async keepInSync(pod: V1Pod, lc: PodLifecycle, live: LiveLauncher<VmControl>, spec: VmSpec): Promise<string> {
    const hash = specHash(spec);
    if (lc.state.kind === 'Running' && lc.state.specHash === hash) return hash;
    try {
      // The files it was started with: a running VM is never a reason to ask a registry.
      await live.client.syncVm(await this.o.images.resolveRunning(spec));
    } catch (err) {
      if (!(err instanceof PreconditionError)) throw err;
      // Pods are mostly immutable; a changed image or size takes effect only when the VM restarts.
      this.o.events.record(pod, 'Warning', 'SpecChangeIgnored', `${err.message}; delete and recreate the pod to apply it`);
    }
    return hash;
  }

  /**
   * Pauses or resumes a VMI's running VM as its annotation asks, whenever the
   * two differ. Resumes only what a pause made (reason Paused): a VM libvirt
   * paused on an I/O error stays paused.
   */
  async reconcilePause(lc: PodLifecycle, live: LiveLauncher<VmControl>): Promise<void> {
    if (!lc.vmi) return;
    const s = live.state;
    if (lc.vmi.paused && s.phase === 'Running' && s.reason !== 'ShuttingDown') {
      await live.client.pause();
      this.o.events.recordFor(lc.vmi.ref, 'Normal', 'Paused', 'VirtualMachineInstance paused');
    } else if (!lc.vmi.paused && s.phase === 'Paused' && s.reason === 'Paused') {
      await live.client.unpause();
      this.o.events.recordFor(lc.vmi.ref, 'Normal', 'Unpaused', 'VirtualMachineInstance unpaused');
    }
  }
}
