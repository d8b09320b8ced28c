// The target side of a live migration on a node (docs/design/live-migration.md
// §3 steps 4, 5, 14). A pod labelled kubevirt.io/migrationJobUID is never
// booted: the pod controller hands it here while its lifecycle is Incoming.
//   prepare  translate its VMI into the VmSpec the source runs (same name and
//            system UUID; the same base images, checked by digest against the
//            source pod's), pull, attach the network for the lent address,
//            spawn the launcher and PrepareIncoming: the launcher then waits
//            for the VM, and the pod's MigrationTarget condition says Ready
//   control  the source's control stream: hello → ready{paths} (the relay then
//            lets the data streams through), commit → finish → ack
//   finish   claim the moved address, FinishIncoming (resume and announce);
//            also when the VMI's migration state shows the commit (endTimestamp
//            without failed) and the stream's commit was lost
// A failed or cancelled migration ends in the target pod's deletion, whose
// removal cancels the incoming launcher and detaches its network
// (pods/controller.ts removeVm). Everything here is idempotent and re-derived
// from the launcher and the API, so an agent restarted mid-way resumes.
import type { V1Pod } from '@kubernetes/client-node';
import type { IncomingPaths, VmState } from '../../launcher/agent-api.js';
import { SpecError } from '../../vmm/errors.js';
import { persistentVolumeDirs } from '../../vmm/host-files.js';
import type { VmSpec } from '../../vmm/spec.js';
import type { PodImages } from '../images/pod-images.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { Launchers } from '../launchers/registry.js';
import type { Logger } from '../log.js';
import type { PodNetwork, VmAttachment } from '../network/pod-network.js';
import { podCpuRequestMillicores } from '../pods/fit.js';
import { guestDnsOf, type NodeDns } from '../pods/guest-dns.js';
import type { VmiContext } from '../pods/lifecycle.js';
import type { VmiSource } from '../pods/vmi-source.js';
import { ControlChannel } from './control-channel.js';
import type { ControlMessage } from './frames.js';
import type { AcceptedControl, RelayServer } from './relay-server.js';

/** What the target asks of its launcher (LauncherClient). */
export interface IncomingControl {
  prepareIncoming(uid: string, spec: VmSpec): Promise<IncomingPaths>;
  finishIncoming(uid: string): Promise<VmState>;
  cancelIncoming(uid: string): Promise<void>;
}

export interface MigrationTargetOptions {
  launchers: Pick<Launchers<IncomingControl>, 'get' | 'start'>;
  network: Pick<PodNetwork, 'attachIncoming' | 'claimMovedAddress'>;
  vmis: Pick<VmiSource, 'specFor' | 'read'>;
  images: Pick<PodImages, 'resolve'>;
  /** A node's pod range (Node.spec.podCIDR): the lent address's home. */
  podCidrOf(node: string): Promise<string | undefined>;
  /** The VMI's running launcher pod's container imageID (repository@digest), to check the target runs the same base. */
  sourceImageID(vmi: VirtualMachineInstance): Promise<string | undefined>;
  relay(): Pick<RelayServer, 'markReady' | 'closeAll'> | undefined;
  dns?: () => NodeDns;
  log: Logger;
}

/** What was learnt about the pod on the way (its VMI, network place, image), for the pod controller to keep. */
export type Learnt = (uid: string, context: { vmi?: VmiContext; attachment?: VmAttachment; imageID?: string }) => void;

/** What a prepare came to; other failures are thrown (and retried by the pod sync). */
export type PrepareOutcome = { type: 'prepared' } | { type: 'gone' } | { type: 'invalid'; message: string };

export class MigrationTarget {
  /** Per migration uid: the target pod's uid and the paths PrepareIncoming returned. */
  private readonly prepared = new Map<string, { podUid: string; paths: IncomingPaths }>();
  /** Per pod uid: the finish under way, so the control stream's commit and a sync never run it twice at once. */
  private readonly finishing = new Map<string, Promise<void>>();
  private readonly log: Logger;

  constructor(private readonly o: MigrationTargetOptions) {
    this.log = o.log.child({ component: 'migration-target' });
  }

  /** Prepares the target launcher for migration `job` (idempotent: a live launcher is prepared again, which it answers from memory). */
  async prepare(pod: V1Pod, job: string, learnt: Learnt): Promise<PrepareOutcome> {
    const uid = pod.metadata!.uid!;
    const log = this.log.child({ pod: `${pod.metadata?.namespace}/${pod.metadata?.name}`, uid, migration: job });
    const vmi = await this.o.vmis.read(pod);
    const found = await this.o.vmis.specFor(pod);
    if (!vmi || found === 'gone') return { type: 'gone' };
    if (found instanceof SpecError) return { type: 'invalid', message: found.message };
    const { spec: translated, ...context } = found;
    learnt(uid, { vmi: context });
    // The pod's request, as for any VM: the scheduler accounted it on this node.
    const spec = { ...translated, cpu: { ...translated.cpu, requestMillicores: podCpuRequestMillicores(pod) } };
    const sourceNode = vmi.status?.nodeName ?? '';
    const lent = { podIP: vmi.status?.interfaces?.[0]?.ipAddress ?? '', homeCidr: (await this.o.podCidrOf(sourceNode)) ?? '' };
    const dns = this.o.dns ? guestDnsOf(pod, this.o.dns()).dns : undefined;
    const { spec: wired, attachment } = await this.o.network.attachIncoming(spec, lent, dns);
    if (attachment) learnt(uid, { attachment });
    const resolved = await this.o.images.resolve(pod, wired, log);
    if (resolved.imageID) learnt(uid, { imageID: resolved.imageID });
    const sourceImage = await this.o.sourceImageID(vmi);
    if (sourceImage?.includes('@sha256:') && resolved.imageID && sourceImage !== resolved.imageID)
      return {
        type: 'invalid',
        message: `the image here is ${resolved.imageID}, the source runs ${sourceImage}: a disk copied incrementally needs the same base`,
      };
    const view = this.o.launchers.get(uid);
    const live =
      view?.live === true
        ? view
        : await this.o.launchers.start(uid, {
            ...(attachment ? { netns: attachment.netnsPath } : {}),
            volumeDirs: persistentVolumeDirs(resolved.spec),
          });
    const paths = await live.client.prepareIncoming(job, resolved.spec);
    this.prepared.set(job, { podUid: uid, paths });
    log.info('ready to receive the VM');
    return { type: 'prepared' };
  }

  /** The commit happened: route the address here, then resume the VM (idempotent; one at a time per pod). */
  finish(podUid: string, job: string): Promise<void> {
    const running = this.finishing.get(podUid);
    if (running) return running;
    const finishing = (async () => {
      const view = this.o.launchers.get(podUid);
      if (!view?.live) throw new Error(`migration ${job}: the target launcher is gone`);
      if (view.state.migration?.phase === 'Resumed') return;
      await this.o.network.claimMovedAddress(podUid);
      await view.client.finishIncoming(job);
      this.log.info({ uid: podUid, migration: job }, 'the VM runs here now');
    })().finally(() => this.finishing.delete(podUid));
    this.finishing.set(podUid, finishing);
    return finishing;
  }

  /**
   * Before the target pod's VM is removed: a launcher still waiting for the VM
   * destroys what it received and removes what it prepared (then exits).
   */
  async cancel(podUid: string): Promise<void> {
    const view = this.o.launchers.get(podUid);
    const m = view?.live ? view.state.migration : undefined;
    if (!view?.live || m?.role !== 'Target' || m.phase === 'Resumed' || m.phase === 'Failed') return;
    await view.client.cancelIncoming(m.uid).catch((err: unknown) => this.log.warn({ err, uid: podUid }, 'CancelIncoming failed'));
    this.o.relay()?.closeAll(m.uid);
  }

  /** The target pod is gone: nothing of its migration is kept. */
  forget(podUid: string): void {
    for (const [job, p] of this.prepared) {
      if (p.podUid !== podUid) continue;
      this.prepared.delete(job);
      this.o.relay()?.closeAll(job);
    }
  }

  /** Takes a control stream the relay accepted (the peer is the migration's source node). */
  accept(stream: AcceptedControl): void {
    const { uid: job, peerNode } = stream;
    const log = this.log.child({ migration: job, peer: peerNode });
    const channel: ControlChannel = new ControlChannel(stream.socket, {
      onMessage: (m) => void this.onControl(job, m, channel, log),
      onClose: (reason) => {
        log.info({ reason: reason.message }, 'migration control stream closed');
        // Before the commit, libvirt on the source then fails at once; after it, the streams are done anyway.
        this.o.relay()?.closeAll(job);
      },
    });
  }

  private async onControl(job: string, m: ControlMessage, channel: ControlChannel, log: Logger): Promise<void> {
    const p = this.prepared.get(job);
    switch (m.type) {
      case 'hello':
        if (!p) return channel.send({ type: 'abort', reason: `the target of migration ${job} is not prepared` });
        channel.send({ type: 'ready', paths: { ...p.paths } });
        this.o.relay()?.markReady(job);
        return;
      case 'commit':
        if (!p) return channel.send({ type: 'abort', reason: `the target of migration ${job} is not prepared` });
        try {
          await this.finish(p.podUid, job);
          channel.send({ type: 'ack' });
        } catch (err) {
          log.error({ err }, 'could not resume the migrated VM');
          channel.send({ type: 'abort', reason: `resuming failed: ${(err as Error).message}` });
        }
        return;
      case 'abort':
        log.info({ reason: m.reason }, 'the source aborted the migration');
        this.o.relay()?.closeAll(job);
        return;
      default:
      // `file` is not needed: the target builds the seed ISO from the spec, as the source did.
    }
  }
}
