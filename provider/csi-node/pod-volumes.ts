// The kubelet's volume manager for CSI volumes, as far as VMs need it: a
// pod's CSI volumes are brought up before its launcher starts (a start
// preparation), and taken down when its VM is removed and by a periodic
// sweep of every pod on disk the node no longer runs (so a crash, or a
// driver down at the time, only delays it). What to do is volume-steps.ts;
// this file does it: records on disk (the kubelet's vol_data.json), the
// driver's calls, the directories. One pod's volumes change one at a time.
import { mkdir, readdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { nodeCapabilities, type DriverClient } from './driver-client.js';
import type { RegisteredDriver } from './plugin-watcher.js';
import { downSteps, upSteps, type DownStep, type PublicationRecord, type UpStep } from './volume-steps.js';
import { csiPluginDir, RECORD_FILE, volumeCapability, type CsiVolume, type SecretRef, type VolumeRecord } from './volume.js';

/** The volume's driver is not registered on the node (missing, or not yet started): the VM waits for it. */
export class CsiDriverNotRegisteredError extends Error {
  readonly kind = 'CsiDriverNotRegistered';
  constructor(
    readonly driver: string,
    message: string,
  ) {
    super(message);
    this.name = 'CsiDriverNotRegisteredError';
  }
}

export interface PodVolumesOptions {
  /** The agent's state directory, the kubelet's root dir (volume.ts). */
  root: string;
  nodeName: string;
  drivers: { driver(name: string): RegisteredDriver | undefined };
  clients: Pick<KubeClients, 'core' | 'storage'>;
  log: Logger;
}

const ignore =
  (...codes: string[]) =>
  (err: NodeJS.ErrnoException) =>
    codes.includes(err.code ?? '') ? undefined : Promise.reject(err);

/** Removes `dir` and its empty parents up to (not including) `stop`; one that is not empty stays. */
async function removeEmptyDirs(dir: string, stop: string): Promise<void> {
  for (let d = dir; d.startsWith(`${stop}/`); d = dirname(d)) {
    const removed = await rmdir(d).then(
      () => true,
      (err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? true : err.code === 'ENOTEMPTY' ? false : Promise.reject(err)),
    );
    if (!removed) return;
  }
}

async function writeRecord(path: string, record: object): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o711 });
  await writeFile(`${path}.tmp`, JSON.stringify(record), { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

export class PodVolumes {
  private readonly busy = new Map<string, Promise<unknown>>();

  constructor(private readonly o: PodVolumesOptions) {}

  /** Brings the pod's volumes up (idempotent); a missing driver is CsiDriverNotRegisteredError, naming it. */
  publish(podUid: string, volumes: readonly CsiVolume[], signal?: AbortSignal): Promise<void> {
    return this.serial(podUid, async () => {
      for (const v of volumes) {
        signal?.throwIfAborted();
        const driver = this.driver(v.driver, `volume ${v.pvName}`);
        // A driver that is down (registered, not answering) is named too: the failed start's message is what the user reads.
        await this.publishOne(podUid, v, driver).catch((err: unknown) => {
          throw new Error(`volume ${v.pvName} of CSI driver ${v.driver}: ${(err as Error).message}`, { cause: err });
        });
      }
    });
  }

  private async publishOne(podUid: string, v: CsiVolume, driver: RegisteredDriver): Promise<void> {
    const traits = {
      attachRequired: await this.attachRequired(v.driver),
      stages: (await nodeCapabilities(driver.client)).has('STAGE_UNSTAGE_VOLUME'),
    };
    const secrets = {
      stage: await this.readSecret(v.nodeStageSecretRef),
      publish: await this.readSecret(v.nodePublishSecretRef),
    };
    let publishContext: Record<string, string> = {};
    for (const step of upSteps(this.o.root, this.o.nodeName, podUid, v, traits))
      publishContext = (await this.up(step, v, driver.client, secrets, publishContext)) ?? publishContext;
  }

  /** Takes down every volume the pod published (idempotent; nothing on disk is nothing to do). */
  unpublishPod(podUid: string): Promise<void> {
    return this.serial(podUid, async () => {
      const all = await this.publications();
      const others = all.filter((p) => p.podUid !== podUid);
      for (const pub of all.filter((p) => p.podUid === podUid)) {
        const driver = this.driver(pub.driver, `the published volume ${pub.pvName}`);
        for (const step of downSteps(this.o.root, pub, others)) await this.down(step, pub, driver.client);
        this.o.log.info({ vm: podUid, pv: pub.pvName, driver: pub.driver }, 'CSI volume unpublished');
      }
      await removeEmptyDirs(join(this.o.root, 'pods', podUid, 'volumes', 'kubernetes.io~csi'), this.o.root);
      await removeEmptyDirs(join(this.o.root, 'pods', podUid, 'volumeDevices', 'kubernetes.io~csi'), this.o.root);
    });
  }

  /**
   * Takes down the volumes of every pod on disk that is not in use, then
   * the stagings no publication needs (a crash between a stage and its
   * publication's record): the periodic sweep. Failures wait for the next one.
   */
  async retainOnly(inUse: (podUid: string) => boolean): Promise<void> {
    const uids = await readdir(join(this.o.root, 'pods')).catch(() => [] as string[]);
    for (const uid of uids.filter((u) => !inUse(u))) {
      await this.unpublishPod(uid).catch((err: unknown) =>
        this.o.log.warn({ err, vm: uid }, "could not take down a removed VM's CSI volumes; will retry"),
      );
    }
    await this.unstageUnpublished().catch((err: unknown) => this.o.log.warn({ err }, 'could not unstage unused CSI volumes; will retry'));
  }

  private async unstageUnpublished(): Promise<void> {
    // A publish under way may be between its stage and its publication's record.
    if (this.busy.size) return;
    const published = new Set((await this.publications()).map((p) => `${p.driver}\n${p.volumeHandle}`));
    const pluginDir = csiPluginDir(this.o.root);
    for (const driverDir of await readdir(pluginDir).catch(() => [] as string[])) {
      for (const hash of await readdir(join(pluginDir, driverDir)).catch(() => [] as string[])) {
        const recordPath = join(pluginDir, driverDir, hash, RECORD_FILE);
        const text = await readFile(recordPath, 'utf8').catch(() => undefined);
        const staged = text === undefined ? undefined : (JSON.parse(text) as VolumeRecord);
        if (!staged?.stagingPath || published.has(`${staged.driver}\n${staged.volumeHandle}`)) continue;
        const driver = this.driver(staged.driver, `the staged volume ${staged.pvName}`);
        await driver.client.node('NodeUnstageVolume', { volumeId: staged.volumeHandle, stagingTargetPath: staged.stagingPath });
        await removeEmptyDirs(staged.stagingPath, this.o.root);
        await rm(recordPath, { force: true });
        await removeEmptyDirs(dirname(recordPath), this.o.root);
        this.o.log.info({ pv: staged.pvName, driver: staged.driver }, 'CSI volume no VM publishes unstaged');
      }
    }
  }

  private driver(name: string, what: string): RegisteredDriver {
    const d = this.o.drivers.driver(name);
    if (!d)
      throw new CsiDriverNotRegisteredError(
        name,
        `CSI driver ${name} of ${what} is not registered on node ${this.o.nodeName}: waiting for it to register`,
      );
    return d;
  }

  private async attachRequired(driver: string): Promise<boolean> {
    try {
      return (await this.o.clients.storage.readCSIDriver({ name: driver })).spec.attachRequired !== false;
    } catch (err) {
      if (isNotFound(err)) return true;
      throw err;
    }
  }

  private async readSecret(ref: SecretRef | undefined): Promise<Record<string, string>> {
    if (!ref) return {};
    const secret = await this.o.clients.core.readNamespacedSecret({ name: ref.name, namespace: ref.namespace });
    return Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
  }

  /** One step up; a waitAttached step returns the attachment's publish context. */
  private async up(
    step: UpStep,
    v: CsiVolume,
    client: DriverClient,
    secrets: { stage: Record<string, string>; publish: Record<string, string> },
    publishContext: Record<string, string>,
  ): Promise<Record<string, string> | undefined> {
    const common = { volumeId: v.volumeHandle, publishContext, volumeCapability: volumeCapability(v), volumeContext: v.volumeAttributes };
    switch (step.kind) {
      case 'waitAttached': {
        const va = await this.o.clients.storage.readVolumeAttachment({ name: step.attachment }).catch((err: unknown) => {
          if (isNotFound(err)) return undefined;
          throw err;
        });
        if (!va?.status?.attached)
          throw new Error(`volume ${v.pvName} is not attached to node ${this.o.nodeName} yet (VolumeAttachment ${step.attachment})`);
        return va.status.attachmentMetadata ?? {};
      }
      case 'recordStaging':
      case 'recordPublication':
        return void (await writeRecord(step.path, step.record));
      case 'stage':
        await mkdir(step.stagingPath, { recursive: true, mode: 0o750 });
        return void (await client.node('NodeStageVolume', { ...common, stagingTargetPath: step.stagingPath, secrets: secrets.stage }));
      case 'publish':
        // The target is the driver's to make; its parent is the node's.
        await mkdir(dirname(step.targetPath), { recursive: true, mode: 0o711 });
        await client.node('NodePublishVolume', {
          ...common,
          ...(step.stagingPath ? { stagingTargetPath: step.stagingPath } : {}),
          targetPath: step.targetPath,
          readonly: v.readOnly,
          secrets: secrets.publish,
        });
        return undefined;
    }
  }

  private async down(step: DownStep, pub: PublicationRecord, client: DriverClient): Promise<void> {
    switch (step.kind) {
      case 'unpublish':
        await client.node('NodeUnpublishVolume', { volumeId: pub.volumeHandle, targetPath: step.targetPath });
        // What the driver left (a target it never mounted): a directory must be empty, a device file is no mount now.
        if (pub.volumeMode === 'Block') await rm(step.targetPath, { force: true });
        else await rmdir(step.targetPath).catch(ignore('ENOENT'));
        return;
      case 'forgetPublication':
        await rm(step.path, { force: true });
        return removeEmptyDirs(dirname(step.path), this.o.root);
      case 'unstage':
        await client.node('NodeUnstageVolume', { volumeId: pub.volumeHandle, stagingTargetPath: step.stagingPath });
        return removeEmptyDirs(step.stagingPath, this.o.root);
      case 'forgetStaging':
        await rm(step.path, { force: true });
        return removeEmptyDirs(dirname(step.path), this.o.root);
    }
  }

  /** Every publication recorded on the node (also what volume stats are read for). */
  async publications(): Promise<PublicationRecord[]> {
    const podsDir = join(this.o.root, 'pods');
    const found: PublicationRecord[] = [];
    for (const uid of await readdir(podsDir).catch(() => [] as string[])) {
      const volumesDir = join(podsDir, uid, 'volumes', 'kubernetes.io~csi');
      for (const pv of await readdir(volumesDir).catch(() => [] as string[])) {
        const text = await readFile(join(volumesDir, pv, RECORD_FILE), 'utf8').catch(() => undefined);
        if (text !== undefined) found.push(JSON.parse(text) as PublicationRecord);
      }
    }
    return found;
  }

  private serial<T>(podUid: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.busy.get(podUid) ?? Promise.resolve()).catch(() => undefined).then(fn);
    this.busy.set(podUid, run);
    void run.finally(() => this.busy.get(podUid) === run && this.busy.delete(podUid)).catch(() => undefined);
    return run;
  }
}
