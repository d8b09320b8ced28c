// The source side of a live migration on a node (docs/design/live-migration.md
// §3 steps 7, 8, 13, 15). The pod controller asks it, on every sync of a
// VMI's running launcher pod, to bring the migration the VMI's state names
// one step on; it reads the launcher's migration state and the VMI, not
// memory, so an agent restarted mid-way resumes:
//   no job yet, target ready   dial the target's control stream, hello,
//                              wait for ready{paths}; open the relay's unix
//                              listeners in the launcher's private run dir;
//                              StartMigration
//   running, abort requested   AbortMigration
//   Migrated                   commit, wait for the ack (or 2 s), hand the
//                              address over; only then may the pod controller
//                              stop the launcher and end the pod (Migrated)
//   Failed, Aborted            close the migration's streams
// The pod's MigrationSource condition follows from the launcher's state
// (conditions.ts).
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { IncomingPaths, MigrationState, StartMigration } from '../../launcher/agent-api.js';
import { MIGRATION_SOCKET_DIR } from '../../launcher/agent-api.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { Launchers, LiveLauncher } from '../launchers/registry.js';
import { parseQuantity } from '../kube/quantity.js';
import type { Logger } from '../log.js';
import type { LentVmi } from '../network/ipam.js';
import type { PodNetwork } from '../network/pod-network.js';
import { migrationOf } from './conditions.js';
import { ControlChannel } from './control-channel.js';
import type { RelayClient, RelayTarget } from './relay-client.js';
import { SOURCE_SOCKETS, startRequest } from './start-request.js';

/** What the source asks of its launcher (LauncherClient). */
export interface OutgoingControl {
  startMigration(req: StartMigration): Promise<MigrationState>;
  abortMigration(uid: string): Promise<MigrationState>;
}

export interface MigrationSourceOptions {
  nodeName: string;
  launchers: Pick<Launchers<OutgoingControl>, 'get'>;
  relay: Pick<RelayClient, 'dial' | 'listen' | 'closeAll'>;
  /** The target's relay port (--migration-port: every node listens on the same one). */
  relayPort: number;
  network: Pick<PodNetwork, 'handOverAddress'>;
  /** The QEMU uid of the VM's launcher (it dials the NBD socket itself). */
  qemuUidOf(uid: string): number | undefined;
  log: Logger;
  /** How long the target has to acknowledge the commit before the address is handed over anyway. */
  ackTimeoutMs?: number;
  /** How long the target has to answer hello with ready. */
  readyTimeoutMs?: number;
}

type MigrationStateCopy = NonNullable<NonNullable<VirtualMachineInstance['status']>['migrationState']>;

/** The VMI's migration when this pod on this node is its source; undefined otherwise. */
export function outgoingOf(vmi: VirtualMachineInstance | undefined, pod: V1Pod, nodeName: string): MigrationStateCopy | undefined {
  const s = vmi?.status?.migrationState;
  if (!s?.migrationUid || s.sourceNode !== nodeName || s.sourcePod !== pod.metadata?.name) return undefined;
  return s;
}

export class MigrationSource {
  /** Per migration uid: its control stream, while open. */
  private readonly channels = new Map<string, ControlChannel>();
  /** Migrations whose address was handed over, by pod uid: the launcher may go. */
  private readonly handedOver = new Set<string>();
  private readonly log: Logger;

  constructor(private readonly o: MigrationSourceOptions) {
    this.log = o.log.child({ component: 'migration-source' });
  }

  /**
   * Moves the pod's outgoing migration on. Once it returns after the VM
   * migrated, the address is handed over and the launcher may go; until
   * then it throws, and the caller keeps the launcher.
   */
  async sync(pod: V1Pod, vmi: VirtualMachineInstance | undefined): Promise<void> {
    const podUid = pod.metadata!.uid!;
    const state = outgoingOf(vmi, pod, this.o.nodeName);
    const view = this.o.launchers.get(podUid);
    if (!state || !view) return;
    const job = state.migrationUid!;
    // A launcher gone after the commit (its last word Migrated) still has its address to hand over.
    const last = migrationOf(view.live ? view.state : view.lastState);
    const mine = last?.uid === job ? last : undefined;
    if (!view.live && mine?.phase !== 'Migrated') return;
    const log = this.log.child({ pod: `${pod.metadata?.namespace}/${pod.metadata?.name}`, uid: podUid, migration: job });
    const target: RelayTarget = { uid: job, node: state.targetNode ?? '', address: state.targetNodeAddress ?? '', port: this.o.relayPort };
    switch (mine?.phase) {
      case undefined:
        if (state.failed || state.completed) return this.close(job);
        if (!state.targetNodeAddress || state.abortRequested || !view.live) return;
        return this.start(podUid, view, state, target, vmi!, log);
      case 'Running':
        if (view.live && (state.abortRequested || state.failed)) {
          log.info('aborting the outgoing migration');
          await view.client.abortMigration(job);
        }
        return;
      case 'Migrated':
        if (!this.handedOver.has(podUid)) await this.commit(podUid, target, vmiRefOf(vmi!), log);
        return;
      default:
        // Failed or Aborted: the VM runs on here; nothing of the migration stays open.
        return this.close(job);
    }
  }

  /** The pod is gone. */
  forget(podUid: string): void {
    this.handedOver.delete(podUid);
  }

  private async start(
    podUid: string,
    view: LiveLauncher<OutgoingControl>,
    state: MigrationStateCopy,
    target: RelayTarget,
    vmi: VirtualMachineInstance,
    log: Logger,
  ): Promise<void> {
    const job = target.uid;
    const channel = await this.channel(target, log);
    channel.send({ type: 'hello', uid: job });
    const ready = await channel.next('ready', this.o.readyTimeoutMs ?? 60_000);
    // Inside the launcher's namespace this is /run/libvirt/m: its libvirtd (root) and QEMU (its uid) dial here.
    const dir = path.join(view.dir, 'libvirt', 'run', MIGRATION_SOCKET_DIR);
    await mkdir(dir, { recursive: true, mode: 0o711 });
    const qemuUid = this.o.qemuUidOf(podUid);
    await this.o.relay.listen(target, 'libvirt', path.join(dir, SOURCE_SOCKETS.libvirt));
    await this.o.relay.listen(target, 'memory', path.join(dir, SOURCE_SOCKETS.memory));
    await this.o.relay.listen(
      target,
      'disk',
      path.join(dir, SOURCE_SOCKETS.disk),
      qemuUid !== undefined ? { uid: qemuUid, gid: qemuUid } : undefined,
    );
    const memoryBytes = memoryBytesOf(vmi);
    const request = startRequest({
      uid: job,
      targetPaths: ready.paths as unknown as IncomingPaths,
      configuration: state.migrationConfiguration,
      dataBytes: memoryBytes,
    });
    const started = await view.client.startMigration(request);
    log.info({ phase: started.phase, bandwidthMiBps: request.bandwidthMiBps ?? 0 }, 'outgoing migration started');
  }

  /** Tells the target to resume, waits for its ack (or the timeout), then hands the address over (`vmi`: where its home follows it). */
  private async commit(podUid: string, target: RelayTarget, vmi: LentVmi, log: Logger): Promise<void> {
    const job = target.uid;
    try {
      const channel = await this.channel(target, log);
      channel.send({ type: 'commit' });
      await channel.next('ack', this.o.ackTimeoutMs ?? 2_000);
      log.info('the target acknowledged the commit');
    } catch (err) {
      // The target also resumes from the VMI's endTimestamp (the controllers copy the commit there).
      log.warn({ err }, 'no ack of the commit from the target; handing the address over anyway');
    }
    await this.o.network.handOverAddress(podUid, { node: target.node, address: target.address, vmi });
    this.handedOver.add(podUid);
    await this.close(job);
  }

  /** The migration's control stream, dialled when none is open. */
  private async channel(target: RelayTarget, log: Logger): Promise<ControlChannel> {
    const open = this.channels.get(target.uid);
    if (open && !open.closed) return open;
    const socket = await this.o.relay.dial(target, 'control', 0);
    const channel: ControlChannel = new ControlChannel(socket, {
      onClose: (reason) => {
        if (this.channels.get(target.uid) === channel) this.channels.delete(target.uid);
        log.info({ reason: reason.message }, 'migration control stream closed');
        // A lost target: its data streams go too, so libvirt fails now, not after TCP's timeouts.
        void this.o.relay.closeAll(target.uid);
      },
    });
    this.channels.set(target.uid, channel);
    return channel;
  }

  private async close(job: string): Promise<void> {
    this.channels.get(job)?.close();
    this.channels.delete(job);
    await this.o.relay.closeAll(job);
  }
}

const vmiRefOf = (vmi: VirtualMachineInstance): LentVmi => ({
  namespace: vmi.metadata.namespace ?? 'default',
  name: vmi.metadata.name!,
  uid: vmi.metadata.uid!,
});

/** The guest memory the VMI asks for, in bytes (128 MiB when it names none). */
function memoryBytesOf(vmi: VirtualMachineInstance): number {
  const mem = vmi.spec.domain.memory?.guest ?? vmi.spec.domain.resources?.requests?.memory;
  return (mem !== undefined ? parseQuantity(String(mem)) : null) ?? 128 * 2 ** 20;
}
