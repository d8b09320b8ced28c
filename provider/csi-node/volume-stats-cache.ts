// The node's published CSI volumes' usage, as the kubelet's volume stats
// calculator keeps it: every period, each publication's driver is asked
// (NodeGetVolumeStats, when it offers GET_VOLUME_STATS) and the answers are
// kept, so a stats summary or a metrics scrape reads the cache and never waits
// on a driver. A driver that fails or is gone leaves that volume out until the
// next period answers.
import type { V1PersistentVolume, V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../log.js';
import { nodeCapabilities } from './driver-client.js';
import { PeriodicPass } from './periodic-pass.js';
import type { RegisteredDriver } from './plugin-watcher.js';
import type { PublicationRecord } from './volume-steps.js';
import { podVolumeName, volumeStatsOf, type CsiVolumeUsage, type PvcRef, type VolumeStats } from './volume-stats.js';

/** The kubelet's --volume-stats-agg-period is a minute; VMs' disks are few, so a shorter one costs little. */
export const VOLUME_STATS_PERIOD_MS = 10_000;

export interface VolumeStatsCacheOptions {
  publications: () => Promise<PublicationRecord[]>;
  drivers: { driver(name: string): RegisteredDriver | undefined };
  readPersistentVolume: (name: string) => Promise<V1PersistentVolume>;
  podOf: (uid: string) => V1Pod | undefined;
  log: Logger;
  periodMs?: number;
  now?: () => Date;
}

export class VolumeStatsCache {
  private byPod = new Map<string, VolumeStats[]>();
  /** A PV's claim does not change while it is bound to it: asked once per PV in use. */
  private readonly claims = new Map<string, PvcRef | undefined>();
  private readonly periodic: PeriodicPass;

  constructor(private readonly o: VolumeStatsCacheOptions) {
    this.periodic = new PeriodicPass(() => this.refresh(), {
      periodMs: o.periodMs ?? VOLUME_STATS_PERIOD_MS,
      log: o.log,
      failure: 'reading CSI volume stats failed; will retry',
    });
  }

  /** The pod's volumes as last read (none when none is published or none answered). */
  forPod(podUid: string): VolumeStats[] {
    return this.byPod.get(podUid) ?? [];
  }

  /** Every published volume as last read. */
  all(): VolumeStats[] {
    return [...this.byPod.values()].flat();
  }

  start(): void {
    this.periodic.start();
  }

  stop(): void {
    this.periodic.stop();
  }

  /** One pass: every publication's driver asked, the cache replaced whole (a gone volume leaves it). */
  async refresh(): Promise<void> {
    const pubs = await this.o.publications();
    const offers = new Map<string, Promise<boolean>>();
    const next = new Map<string, VolumeStats[]>();
    for (const pub of pubs) {
      const driver = this.o.drivers.driver(pub.driver);
      if (!driver) continue;
      if (!offers.has(pub.driver))
        offers.set(
          pub.driver,
          nodeCapabilities(driver.client).then((c) => c.has('GET_VOLUME_STATS')),
        );
      const stats = await this.readOne(pub, driver, offers.get(pub.driver)!).catch((err: unknown) => {
        this.o.log.debug({ err, pv: pub.pvName, driver: pub.driver }, 'NodeGetVolumeStats failed');
        return undefined;
      });
      if (stats) next.set(pub.podUid, [...(next.get(pub.podUid) ?? []), stats]);
    }
    this.byPod = next;
    for (const pv of this.claims.keys()) if (!pubs.some((p) => p.pvName === pv)) this.claims.delete(pv);
  }

  private async readOne(pub: PublicationRecord, driver: RegisteredDriver, offers: Promise<boolean>): Promise<VolumeStats | undefined> {
    if (!(await offers)) return undefined;
    const res = (await driver.client.node('NodeGetVolumeStats', {
      volumeId: pub.volumeHandle,
      volumePath: pub.targetPath,
      ...(pub.stagingPath ? { stagingTargetPath: pub.stagingPath } : {}),
    })) as { usage?: CsiVolumeUsage[] };
    const pvcRef = await this.claimOf(pub.pvName);
    const podVolumes = (this.o.podOf(pub.podUid)?.spec?.volumes ?? []).map((v) => ({
      name: v.name,
      ...(v.persistentVolumeClaim ? { persistentVolumeClaim: v.persistentVolumeClaim } : {}),
    }));
    return volumeStatsOf(res.usage ?? [], {
      name: podVolumeName(podVolumes, pvcRef?.name, pub.pvName),
      ...(pvcRef ? { pvcRef } : {}),
      time: (this.o.now?.() ?? new Date()).toISOString().replace(/\.\d{3}Z$/, 'Z'),
    });
  }

  private async claimOf(pvName: string): Promise<PvcRef | undefined> {
    if (this.claims.has(pvName)) return this.claims.get(pvName);
    const ref = (await this.o.readPersistentVolume(pvName)).spec?.claimRef;
    const claim = ref?.name && ref.namespace ? { name: ref.name, namespace: ref.namespace } : undefined;
    this.claims.set(pvName, claim);
    return claim;
  }
}
