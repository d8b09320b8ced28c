// A DataVolume's import on the node that runs the VM, straight into the
// published volume, with no importer pod: an http source through the node's
// URL download and its address policy, a registry source through the node's
// image store as a containerDisk is pulled (its `/disk/*` file). A raw
// download lands in the volume and is the disk; anything else is converted by
// qemu-img to raw under a temporary name in the volume, reading the image
// store's file where it is. The fsync, the rename to disk.img and then a
// marker file make it complete, so an agent killed
// half-way starts again from scratch and never boots a half-written disk,
// and a second VM (or a restart) finds the marker and imports nothing.
// A Block volume is the device the driver published: qemu-img writes the
// image onto it (`-n`), an http source downloaded first into the node's
// scratch directory (its format is known only once it is in, and the download
// stops at the device's size), and the claim's Succeeded report is its
// completion record (see completed()). One import per claim at a time: in the
// agent a per-claim queue, across nodes (an RWX claim published on two) the
// claim's importer condition, taken with a preconditioned write
// (import-claim.ts); a node that finds another importing fails the start,
// which retries until the import is done. A volume published read-only is
// never written: its start fails naming the field until an import is done.
// The node reports on the claim's status (phase, progress at most once a
// second, message: provider/kubevirt/datavolume-report.ts); the DataVolume
// controller mirrors it. What to do is import-plan.ts.
import { spawn } from 'node:child_process';
import { open, rename, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import type { PodImages } from '../images/pod-images.js';
import type { RegistryCredential } from '../images/keyring.js';
import { IMPORT_ENDPOINT_ANNOTATION, IMPORT_SECRET_ANNOTATION, type ImportPhase } from '../kubevirt/datavolume-annotations.js';
import { CLAIM_SIZE_FIELD, IMPORTER_CONDITION_TYPE, importReportOf, type ImportReport } from '../kubevirt/datavolume-report.js';
import { deviceBytes } from '../csi/block-devices.js';
import { SpecError } from '../../vmm/errors.js';
import { vetBaseImage } from '../../vmm/disks/base-image.js';
import type { DownloadProgress } from '../../vmm/disks/download.js';
import {
  decideImport,
  downloadCapBytes,
  downloadRefusal,
  DOWNLOAD_TEMP_FILE,
  IMPORT_MARKER_FILE,
  IMPORT_TEMP_FILE,
  importPercent,
  lastProgress,
  ProgressThrottle,
  sizeRefusal,
  stagingOf,
  type ClaimDisk,
  type ImportSourceSpec,
} from './import-plan.js';
import { HEARTBEAT_MS, holderOf, IMPORT_FENCE_MS, ImportReports } from './import-claim.js';
import { emptyDir } from './scratch-dir.js';
import { importWriteCache } from './direct-write.js';
import { fsyncPath } from '../atomic-file.js';

/** An import failed; the message names the claim and the reason (the annotation at fault, where one is). */
export class VolumeImportError extends Error {
  readonly kind = 'VolumeImport';
}

export interface VolumeImportsOptions {
  nodeName: string;
  clients: Pick<KubeClients, 'core'>;
  /** Streams an http(s) URL into a new file under the node's download policy (vmm/disks/download.ts). */
  download: (url: string, dest: string, log: Logger, signal?: AbortSignal, onProgress?: DownloadProgress) => Promise<number>;
  /** A registry image's disk file in the node's image store (PodImages.diskFile). */
  registryDisk: PodImages['diskFile'];
  /** Where an http source for a Block volume is downloaded before it is written onto the device (the node's own disk). */
  scratchDir: string;
  /** A published Block volume's size in bytes (blockdev --getsize64 by default). */
  deviceBytes?: (device: string) => Promise<number>;
  log: Logger;
  nowMs?: () => number;
  /** The wall clock, against which another node's report is judged stale (tests). */
  now?: () => Date;
  progressIntervalMs?: number;
  /** The holder's heartbeat and fence (import-claim.ts), shorter in tests. */
  lease?: { heartbeatMs: number; fenceMs: number };
}

/** The reason alone, with the annotation or claim field it concerns: download and pull errors are about the endpoint. */
function reasonOf(err: unknown): string {
  const message = err instanceof SpecError ? err.causes.map((c) => c.message).join('; ') : (err as Error).message;
  return message.startsWith('cdi.kubevirt.io/') || message.startsWith(`${CLAIM_SIZE_FIELD}:`)
    ? message
    : `${IMPORT_ENDPOINT_ANNOTATION}: ${message}`;
}

export class VolumeImports {
  /** Imports under way, by claim: a second VM on the claim waits for the first import and then finds its record. */
  private readonly busy = new Map<string, Promise<unknown>>();
  private readonly claims: ImportReports;
  private readonly nowMs: () => number;
  private scratch?: Promise<void>;

  constructor(private readonly o: VolumeImportsOptions) {
    this.nowMs = o.nowMs ?? (() => performance.now());
    this.claims = new ImportReports(o, o.now);
  }

  /** Imports what each claim's source says and its volume lacks (idempotent); a failure is a VolumeImportError naming the claim. */
  async ensure(pod: V1Pod, claims: readonly ClaimDisk[], signal?: AbortSignal): Promise<void> {
    const log = this.o.log.child({ pod: `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`, uid: pod.metadata?.uid });
    for (const c of claims) {
      signal?.throwIfAborted();
      await this.serial(`${c.namespace}/${c.claim}`, () =>
        this.ensureOne(pod, c, log.child({ claim: `${c.namespace}/${c.claim}`, pv: c.pvName }), signal),
      );
    }
  }

  private async ensureOne(pod: V1Pod, c: ClaimDisk, log: Logger, signal?: AbortSignal, attempt = 1): Promise<void> {
    const pvc = await this.o.clients.core.readNamespacedPersistentVolumeClaim({ name: c.claim, namespace: c.namespace });
    const report = importReportOf(pvc.status?.conditions);
    const reported = report?.phase;
    const cdiDone = pvc.metadata?.annotations?.[CDI_IMPORT_PHASE_ANNOTATION] === 'Succeeded';
    const decision = decideImport(pvc.metadata?.annotations, reported, cdiDone || (await completed(c, reported)));
    switch (decision.kind) {
      case 'none':
        return;
      case 'done':
        if (decision.report) await this.claims.report(c, 'Succeeded', 100, log);
        return;
      case 'invalid':
        return this.fail(c, decision.message, log);
      case 'import': {
        // Not reported on the claim: a writable consumer, or the node importing, may still complete it.
        if (c.readOnly)
          throw new VolumeImportError(
            `claim "${c.claim}": its DataVolume import is not done and ${c.readOnly} makes the volume read-only here; an import never writes a read-only volume: it waits for a writable consumer's import`,
          );
        const holder = holderOf(pvc, this.o.nodeName, c.multiNode === true, this.o.now?.() ?? new Date());
        if (holder.kind === 'other')
          throw new VolumeImportError(
            `claim "${c.claim}": node ${holder.node} is importing it (its ${IMPORTER_CONDITION}); this start waits for that import and retries`,
          );
        // A Block volume's size, read once: for the check below and the import's size limits.
        const device = c.volumeMode === 'Block' ? await (this.o.deviceBytes ?? deviceBytes)(c.diskPath) : undefined;
        // A device with data on it and no import of this claim under way or failed: not ours to overwrite.
        if (device !== undefined && !ownImportRecord(report) && (await deviceHoldsData(c.diskPath, device)))
          return this.fail(c, `${IMPORT_ENDPOINT_ANNOTATION}: ${NOT_BLANK}`, log);
        if (c.volumeMode === 'Block') await this.scratchReady();
        if (!(await this.claims.claim(c, pvc.metadata?.resourceVersion))) {
          // Changed since the read (another node took it, or a report landed): decide again from a new read.
          if (attempt >= 3) throw new VolumeImportError(`claim "${c.claim}": its import could not be taken: the claim keeps changing`);
          return this.ensureOne(pod, c, log, signal, attempt + 1);
        }
        return this.run(pod, c, decision.source, device, log, signal);
      }
    }
  }

  /** `device`: a Block volume's size in bytes. */
  private async run(
    pod: V1Pod,
    c: ClaimDisk,
    source: ImportSourceSpec,
    device: number | undefined,
    log: Logger,
    signal?: AbortSignal,
  ): Promise<void> {
    const block = c.volumeMode === 'Block';
    const dir = dirname(c.diskPath);
    const temp = join(dir, IMPORT_TEMP_FILE);
    const download = block ? join(this.o.scratchDir, `${c.pvName}${DOWNLOAD_TEMP_FILE}`) : join(dir, DOWNLOAD_TEMP_FILE);
    // A Block volume's directory is the pod's volumeDevices dir, not the volume: nothing of the import goes there.
    const cleanUp = () => Promise.all([block ? undefined : rm(temp, { force: true }), rm(download, { force: true })]);
    // What a killed import left: it starts again from scratch.
    await cleanUp();
    // On a volume many nodes share, the import stops when its claim on it can no longer be renewed.
    const fence = c.multiNode ? new AbortController() : undefined;
    const outer = signal;
    signal = fence ? (outer ? AbortSignal.any([outer, fence.signal]) : fence.signal) : outer;
    const progress = this.progress(c, log, fence);
    const t0 = this.nowMs();
    log.info({ source: source.kind }, 'volume import started');
    try {
      let input = download;
      if (source.kind === 'http') {
        if (source.secretName) throw new Error(`${IMPORT_SECRET_ANNOTATION}: credentials for an http source are not supported by vkvm yet`);
        await this.download(c, source.url, download, device, progress, log, signal);
      } else {
        const cred = source.secretName ? await this.credential(c.namespace, source.secretName) : undefined;
        input = await this.o.registryDisk(pod, source.image, cred, log);
      }
      // Untrusted bytes: qcow2 without backing or data file, or raw, as for any base image.
      const { format, virtualSizeBytes } = await vetBaseImage(input, IMPORT_ENDPOINT_ANNOTATION);
      const limit = device !== undefined ? { bytes: device, of: 'device' as const } : { bytes: c.capacityBytes, of: 'capacity' as const };
      const tooBig = sizeRefusal(virtualSizeBytes, limit, c.claim);
      if (tooBig) throw new Error(tooBig);
      const staging = stagingOf(source.kind, format, c.volumeMode);
      if (staging === 'onto-device') {
        const convertShare = (p: number) => progress(importPercent('convert', p, source.kind === 'http'));
        await this.convert(input, format, c.diskPath, convertShare, signal, ['-n', ...(await importWriteCache(c.diskPath, true))]);
        await rm(download, { force: true });
        await fsyncPath(c.diskPath);
        // The completion record: the report must reach the claim before the VM may boot from the device.
        progress.stop();
        await this.claims.report(c, 'Succeeded', 100, log, undefined, { mustReach: true });
        this.logDone(log, t0, virtualSizeBytes, format);
        return;
      }
      let staged = download;
      if (staging === 'convert') {
        const cache = await importWriteCache(temp, false);
        await this.convert(input, format, temp, (p) => progress(importPercent('convert', p, source.kind === 'http')), signal, cache);
        staged = temp;
        // Gone before the fsync: its dirty pages are dropped, never written to the disk.
        await rm(download, { force: true });
      }
      // The guest sees the claim's size, as CDI grows an import to its claim.
      if (c.capacityBytes !== undefined && virtualSizeBytes < c.capacityBytes) await truncate(staged, c.capacityBytes);
      await fsyncPath(staged);
      await rename(staged, c.diskPath);
      await writeFile(join(dir, IMPORT_MARKER_FILE), `${JSON.stringify({ source: source.kind, importedAt: new Date().toISOString() })}\n`, {
        mode: 0o600,
      });
      await fsyncPath(dir);
      progress.stop();
      await this.claims.report(c, 'Succeeded', 100, log);
      this.logDone(log, t0, virtualSizeBytes, format);
    } catch (err) {
      progress.stop();
      await cleanUp();
      if (outer?.aborted) throw err;
      // Not reported: another node may hold the import by now.
      if (fence?.signal.aborted) throw new VolumeImportError(`claim "${c.claim}": ${(fence.signal.reason as Error).message}`);
      return this.fail(c, reasonOf(err), log);
    }
  }

  /** An http source's download; for a Block volume stopped once it passes the device's size (downloadCapBytes), refused naming the size field. */
  private async download(
    c: ClaimDisk,
    url: string,
    dest: string,
    device: number | undefined,
    progress: (percent: number) => void,
    log: Logger,
    signal?: AbortSignal,
  ): Promise<void> {
    const cap = device === undefined ? Infinity : downloadCapBytes(device);
    const tooLarge = new AbortController();
    const both = signal ? AbortSignal.any([signal, tooLarge.signal]) : tooLarge.signal;
    await this.o
      .download(url, dest, log, both, (received, total) => {
        if (received > cap || (total ?? 0) > cap) return tooLarge.abort();
        if (total) progress(importPercent('download', (received * 100) / total, true));
      })
      .catch((err: unknown) => {
        if (tooLarge.signal.aborted && !signal?.aborted) throw new Error(downloadRefusal(device!, c.claim), { cause: err });
        throw err;
      });
  }

  /**
   * The scratch directory, emptied once per agent before its first use: a
   * download an agent killed half-way left is gone even when its claim is.
   * Its contents, not the directory, which may be a mount point; a failure
   * is not kept, so the next import tries again.
   */
  private scratchReady(): Promise<void> {
    const dir = this.o.scratchDir;
    this.scratch ??= emptyDir(dir).catch((err: unknown) => {
      this.scratch = undefined;
      throw new Error(`the node's scratch directory ${dir} could not be emptied: ${(err as Error).message}`, { cause: err });
    });
    return this.scratch;
  }

  /**
   * The import's progress onto the claim, at most once per interval: a
   * report is sent in the background (the copy never waits for the API),
   * and 0 and 100 are the Running and Succeeded reports themselves. The last
   * figure is sent again every HEARTBEAT_MS: the holder's heartbeat, without
   * which another node takes the import over (import-claim.ts). Stopped
   * before the last report, which nothing may follow.
   */
  private progress(c: ClaimDisk, log: Logger, fence?: AbortController): ((percent: number) => void) & { stop: () => void } {
    const throttle = new ProgressThrottle(this.o.progressIntervalMs ?? 1000, this.nowMs);
    const { heartbeatMs, fenceMs } = this.o.lease ?? { heartbeatMs: HEARTBEAT_MS, fenceMs: IMPORT_FENCE_MS };
    let last = 0;
    let reached = this.nowMs();
    const send = (percent: number) => void this.claims.report(c, 'Running', percent, log).then((ok) => ok && (reached = this.nowMs()));
    const heartbeat = setInterval(() => {
      if (fence && this.nowMs() - reached > fenceMs)
        fence.abort(new Error(`import stopped: no report reached the API server for ${fenceMs} ms, so another node may take it over`));
      send(last);
    }, heartbeatMs);
    heartbeat.unref();
    const report = (percent: number) => {
      if (percent <= 0 || percent >= 100 || !throttle.admit(percent)) return;
      last = percent;
      log.debug({ percent }, 'volume import progress');
      send(percent);
    };
    return Object.assign(report, { stop: () => clearInterval(heartbeat) });
  }

  private logDone(log: Logger, t0: number, virtualSizeBytes: number, format: string): void {
    const s = (this.nowMs() - t0) / 1000;
    log.info({ s: Number(s.toFixed(3)), mibS: Number((virtualSizeBytes / 2 ** 20 / s).toFixed(1)), format }, 'volume import done');
  }

  /** `qemu-img convert -p -O raw` straight into the volume (`extra`: `-n` onto a device); `onPercent` gets qemu-img's own progress. */
  private convert(
    input: string,
    format: string,
    output: string,
    onPercent: (p: number) => void,
    signal?: AbortSignal,
    extra: string[] = [],
  ): Promise<void> {
    return new Promise((resolve, reject) => {
      // Killed with the agent (the unit keeps its other processes): a new agent imports again, never beside a writer left running.
      const child = spawn(
        'setpriv',
        ['--pdeathsig', 'KILL', 'qemu-img', 'convert', '-p', ...extra, '-f', format, '-O', 'raw', input, output],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
          ...(signal ? { signal } : {}),
        },
      );
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (text: string) => {
        const percent = lastProgress(text);
        if (percent !== undefined) onPercent(percent);
      });
      child.stderr.setEncoding('utf8').on('data', (text: string) => (stderr = (stderr + text).slice(-2000)));
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`qemu-img convert failed (exit ${code}): ${stderr.trim()}`))));
    });
  }

  /** CDI's import secret (accessKeyId, secretKey); one the node may not read is an error naming the annotation, never an anonymous pull. */
  private async credential(namespace: string, name: string): Promise<RegistryCredential> {
    const at = `${IMPORT_SECRET_ANNOTATION}: Secret ${namespace}/${name}`;
    const secret = await this.o.clients.core.readNamespacedSecret({ name, namespace }).catch((err: unknown) => {
      throw new Error(`${at} cannot be read by node ${this.o.nodeName}: ${(err as Error).message}`, { cause: err });
    });
    const field = (k: string) => (secret.data?.[k] ? Buffer.from(secret.data[k], 'base64').toString('utf8') : undefined);
    const username = field('accessKeyId');
    const password = field('secretKey');
    if (username === undefined || password === undefined) throw new Error(`${at} has no accessKeyId and secretKey`);
    return { username, password, from: `${namespace}/${name}` };
  }

  private async fail(c: ClaimDisk, reason: string, log: Logger): Promise<never> {
    log.warn({ reason }, 'volume import failed; the start retries with back-off');
    await this.claims.report(c, 'Failed', 0, log, reason);
    throw new VolumeImportError(`claim "${c.claim}": import failed: ${reason}`);
  }

  private serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.busy.get(key) ?? Promise.resolve()).catch(() => undefined).then(fn);
    this.busy.set(key, run);
    void run.finally(() => this.busy.get(key) === run && this.busy.delete(key)).catch(() => undefined);
    return run;
  }
}

/**
 * Whether the volume holds its import already. A Filesystem volume carries a
 * marker file beside disk.img, written after it, so the record travels with
 * the volume (a restart, a second VM). A Block volume is the guest's whole
 * device: no filesystem holds a marker, and any byte of it is the guest's.
 * Its record is the claim's own per-volume state, the node's Succeeded report
 * (the vkvm.io/DataVolumeImport condition, written only after the device's
 * fsync): a tenant cannot write a claim's status, the claim lives as long as
 * the volume, and the resizer keeps the conditions that are not its own. So
 * an import runs once, and an agent killed before the report imports again
 * from scratch. A claim made again over a volume (a restore, a retained
 * volume bound anew) has lost that record: ensureOne then refuses a device
 * that holds data rather than import over it.
 */
async function completed(c: ClaimDisk, reported: ImportPhase | undefined): Promise<boolean> {
  if (c.volumeMode === 'Block') return reported === 'Succeeded';
  return stat(join(dirname(c.diskPath), IMPORT_MARKER_FILE)).then(
    () => true,
    () => false,
  );
}

/** CDI's record of a finished import, on claims CDI imported before vkvm served them. */
const CDI_IMPORT_PHASE_ANNOTATION = 'cdi.kubevirt.io/storage.pod.phase';

const IMPORTER_CONDITION = `${IMPORTER_CONDITION_TYPE} condition, Running`;

const NOT_BLANK =
  'the block device already holds data and the claim has no import record (a restored or re-bound claim?): it is not overwritten; remove the import annotations to use the device as it is, or import into a new claim';

/**
 * Whether the claim's status shows this node's own import of it, begun or
 * failed (not this guard's refusal): then the device's bytes are that
 * import's, and importing again is safe. A claim made again (a restore, an
 * apply of a saved manifest, a retained volume bound anew) has no status.
 */
function ownImportRecord(report: ImportReport | undefined): boolean {
  if (report === undefined) return false;
  return report.phase !== 'Failed' || !(report.message ?? '').endsWith(NOT_BLANK);
}

/** Any byte but zero in the device's first or last MiB: a fresh volume of the driver reads as zeros there. */
async function deviceHoldsData(device: string, bytes: number): Promise<boolean> {
  const span = Math.min(bytes, 2 ** 20);
  const fh = await open(device, 'r');
  try {
    for (const at of [0, bytes - span]) {
      const { buffer, bytesRead } = await fh.read(Buffer.alloc(span), 0, span, at);
      if (buffer.subarray(0, bytesRead).some((b) => b !== 0)) return true;
    }
    return false;
  } finally {
    await fh.close();
  }
}
