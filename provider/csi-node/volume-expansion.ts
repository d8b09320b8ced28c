// The kubelet's part of a CSI volume's expansion, for the volumes the node has
// published for VMs (docs/design/csi.md §3, §6). Every period, each
// publication's claim is read; when it asks for expansion
// (expansion-plan.ts), the node, in order: calls the driver's
// NodeExpandVolume (vkvm's driver in --expansion=node grows the volume's file
// there, then the loop device and ext4); grows KubeVirt's disk.img in a
// Filesystem volume to the claim's size; tells the VM's running QEMU
// (the launcher's ResizeDisk, QMP block_resize), so the guest sees it; and
// last reports on the claim. Each step is idempotent and the claim is the
// only record of what is left to do, so an agent restarted anywhere in between
// does it all again, harmlessly, at its next pass.
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Logger } from '../log.js';
import { nodeCapabilities } from './driver-client.js';
import { PeriodicPass } from './periodic-pass.js';
import { claimExpansion, claimMayExpand, diskImageGrowth } from './expansion-plan.js';
import type { RegisteredDriver } from './plugin-watcher.js';
import type { PublicationRecord } from './volume-steps.js';

/**
 * The kubelet's volume manager reconciles every 100 ms from its caches; a node may not watch claims (the Node
 * authorizer allows only a get of its pods' claims), so this reads each published claim once a period: 100 VMs
 * on CSI claims are 10 reads a second.
 */
export const EXPANSION_PERIOD_MS = 10_000;

export interface VolumeExpansionsOptions {
  publications: () => Promise<PublicationRecord[]>;
  drivers: { driver(name: string): RegisteredDriver | undefined };
  readPersistentVolume: (name: string) => Promise<V1PersistentVolume>;
  readClaim: (namespace: string, name: string) => Promise<V1PersistentVolumeClaim>;
  /** A merge patch of the claim's status subresource. */
  patchClaimStatus: (namespace: string, name: string, body: object) => Promise<unknown>;
  /** The running VM's launcher for a pod, if one runs: it tells QEMU a disk grew. */
  runningVm: (podUid: string) => { resizeDisk(path: string, sizeBytes: number): Promise<void> } | undefined;
  log: Logger;
  periodMs?: number;
}

export class VolumeExpansions {
  private readonly periodic: PeriodicPass;
  /** Each published PV's claim: a bound PV's claimRef does not change, so the PV is read once, not every pass. */
  private readonly claimOf = new Map<string, { namespace: string; name: string }>();

  constructor(private readonly o: VolumeExpansionsOptions) {
    this.periodic = new PeriodicPass(() => this.reconcile(), {
      periodMs: o.periodMs ?? EXPANSION_PERIOD_MS,
      log: o.log,
      failure: 'checking CSI volumes for expansion failed; will retry',
    });
  }

  start(): void {
    this.periodic.start();
  }

  stop(): void {
    this.periodic.stop();
  }

  /** One pass over every publication; one that fails is retried at the next. */
  async reconcile(): Promise<void> {
    const pubs = await this.o.publications();
    const published = new Set(pubs.map((p) => p.pvName));
    for (const pv of this.claimOf.keys()) if (!published.has(pv)) this.claimOf.delete(pv);
    for (const pub of pubs) {
      await this.expandOne(pub).catch((err: unknown) =>
        this.o.log.warn({ err, pv: pub.pvName, pod: pub.podUid }, 'expanding a CSI volume failed; will retry'),
      );
    }
  }

  private async expandOne(pub: PublicationRecord): Promise<void> {
    let pv: V1PersistentVolume | undefined;
    let ref = this.claimOf.get(pub.pvName);
    if (!ref) {
      pv = await this.o.readPersistentVolume(pub.pvName);
      const { namespace, name } = pv.spec?.claimRef ?? {};
      if (!namespace || !name) return;
      this.claimOf.set(pub.pvName, (ref = { namespace, name }));
    }
    const claim = await this.o.readClaim(ref.namespace, ref.name);
    if (!claimMayExpand(claim)) return;
    pv ??= await this.o.readPersistentVolume(pub.pvName);
    const plan = claimExpansion(pv, claim);
    if (plan.kind === 'none') return;
    const driver = this.o.drivers.driver(pub.driver);
    if (!driver) return;
    const log = this.o.log.child({ pv: pub.pvName, claim: `${ref.namespace}/${ref.name}`, toBytes: plan.toBytes });
    if ((await nodeCapabilities(driver.client)).has('EXPAND_VOLUME'))
      await driver.client.node('NodeExpandVolume', {
        volumeId: pub.volumeHandle,
        volumePath: pub.targetPath,
        ...(pub.stagingPath ? { stagingTargetPath: pub.stagingPath } : {}),
        capacityRange: { requiredBytes: plan.toBytes },
      });
    const disk = pub.volumeMode === 'Block' ? pub.targetPath : join(pub.targetPath, 'disk.img');
    let diskBytes = plan.toBytes;
    if (pub.volumeMode === 'Filesystem') diskBytes = await growDiskImage(disk, plan.toBytes);
    await this.o.runningVm(pub.podUid)?.resizeDisk(disk, diskBytes);
    await this.o.patchClaimStatus(ref.namespace, ref.name, plan.status);
    log.info('volume expanded for the VM');
  }
}

/** Grows disk.img (sparse) to the claim's size; never shrinks it. Returns its size. */
async function growDiskImage(path: string, claimBytes: number): Promise<number> {
  const current = (await stat(path)).size;
  const target = diskImageGrowth(current, claimBytes);
  if (target === undefined) return current;
  const f = await open(path, 'r+');
  try {
    await f.truncate(target);
  } finally {
    await f.close();
  }
  return target;
}
