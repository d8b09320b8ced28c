// What is left on the node of pods that are gone: VMs whose pod UID is not in
// the synced pod cache (the pod was deleted while the agent was down, or
// before its key was ever synced), and VM networks and CSI volume
// publications nothing uses. Run once the
// pod cache is synced, at start-up and every 30 s (with the launchers found
// again and the node network repaired), so a missing UID really is gone.
import type { V1Pod } from '@kubernetes/client-node';
import type { Launchers, VmControl } from '../launchers/registry.js';
import type { Logger } from '../log.js';
import type { VmNetwork } from './vm-runtime.js';

export interface OrphanSweepOptions {
  pods: () => readonly V1Pod[];
  launchers: Pick<Launchers<VmControl>, 'discover' | 'uids' | 'get'>;
  network: Pick<VmNetwork, 'retainOnly' | 'ensureNode'>;
  /** The CSI volumes published for VMs (csi-node/pod-volumes.ts). */
  volumes?: { retainOnly(inUse: (uid: string) => boolean): Promise<void>; unpublishPod(uid: string): Promise<void> };
  /** Whether the pod controller still acts on this UID. */
  known: (uid: string) => boolean;
  /** Removes a VM: launcher, directory, network. */
  removeVm: (uid: string) => Promise<void>;
  log: Logger;
}

export async function removeOrphans(o: OrphanSweepOptions): Promise<void> {
  const podUIDs = new Set(o.pods().map((p) => p.metadata?.uid));
  for (const uid of o.launchers.uids()) {
    if (podUIDs.has(uid)) continue;
    o.log.info({ vm: uid }, 'removing the VM of a pod that no longer exists');
    await o.removeVm(uid).catch((err: unknown) => o.log.error({ err, vm: uid }, 'could not remove an orphaned VM; will retry'));
  }
  // Networks of VMs removed while the agent was down, or of pods deleted before their VM started.
  const inUse = (uid: string) => !!o.launchers.get(uid) || o.known(uid) || podUIDs.has(uid);
  await o.network.retainOnly(inUse).catch((err: unknown) => o.log.error({ err }, 'could not remove orphaned VM networks; will retry'));
  await o.volumes?.retainOnly(inUse);
}

/** The periodic repair: launchers unreachable at start-up, orphans no event pointed at, the node network. */
export async function sweepOrphans(o: OrphanSweepOptions): Promise<void> {
  try {
    await o.launchers.discover();
    await removeOrphans(o);
  } catch (err) {
    o.log.warn({ err }, 'orphan sweep failed');
  }
  // Also repairs the bridge, NAT rules and DHCP server if something removed them.
  await o.network.ensureNode().catch((err: unknown) => o.log.warn({ err }, 'pod network repair failed'));
}
