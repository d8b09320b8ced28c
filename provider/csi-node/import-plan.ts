// What a DataVolume import on this node is, pure: which claims carry a source
// to import (the annotations of provider/kubevirt/datavolume-annotations.ts),
// whether the volume holds it already (its completion record), and qemu-img's
// progress output. The report's shape is provider/kubevirt/datavolume-report.ts;
// the I/O is volume-import.ts.
import {
  IMPORT_ENDPOINT_ANNOTATION,
  IMPORT_SECRET_ANNOTATION,
  IMPORT_SOURCE_ANNOTATION,
  REGISTRY_ENDPOINT_PREFIX,
  type ImportPhase,
} from '../kubevirt/datavolume-annotations.js';
import { CLAIM_SIZE_FIELD } from '../kubevirt/datavolume-report.js';
import type { CsiAccessMode } from './volume.js';

/** A VMI's claim on a CSI volume, as published for its pod: where an import writes. */
export interface ClaimDisk {
  namespace: string;
  claim: string;
  pvName: string;
  /** disk.img inside the published directory, or the device of a Block volume. */
  diskPath: string;
  /** A Block volume is a device: the image is converted onto it, and its completion is recorded on the claim. */
  volumeMode: 'Filesystem' | 'Block';
  /** The claim's status.capacity.storage in bytes, when known: a raw image smaller than it is grown to it. */
  capacityBytes?: number;
  /** The field that makes the volume read-only for this VMI (readOnlyField): an import never writes it. */
  readOnly?: string;
  /** The volume may be published on many nodes at once (ReadWriteMany): only the node holding the import writes it. */
  multiNode?: boolean;
}

export type ImportSourceSpec =
  { kind: 'http'; url: string; secretName?: string } | { kind: 'registry'; image: string; secretName?: string };

/** What a claim's volume needs before its VM boots. */
export type ImportDecision =
  /** No source (a plain claim, or a blank DataVolume). */
  | { kind: 'none' }
  /** Imported before (its completion record); `report` when the claim does not say Succeeded yet. */
  | { kind: 'done'; report: boolean }
  | { kind: 'import'; source: ImportSourceSpec }
  /** The annotations are unusable; the message names the annotation. */
  | { kind: 'invalid'; message: string };

/** Temporary names inside the volume; only `disk.img` and the marker mean anything to a later start. */
export const IMPORT_TEMP_FILE = '.vkvm-import.img.tmp';
export const DOWNLOAD_TEMP_FILE = '.vkvm-import.download.tmp';
export const IMPORT_MARKER_FILE = '.vkvm-imported';

/**
 * `reported`: the phase the claim's report says (datavolume-report.ts).
 * `completed`: the volume's completion record says it was imported (the
 * marker file of a Filesystem volume; a Block volume's is the claim's
 * Succeeded report itself, volume-import.ts).
 */
export function decideImport(
  annotations: Record<string, string> | undefined,
  reported: ImportPhase | undefined,
  completed: boolean,
): ImportDecision {
  const a = annotations ?? {};
  const source = a[IMPORT_SOURCE_ANNOTATION];
  if (source === undefined || source === 'none') return { kind: 'none' };
  if (completed) return { kind: 'done', report: reported !== 'Succeeded' };
  const endpoint = a[IMPORT_ENDPOINT_ANNOTATION] ?? '';
  const secret = a[IMPORT_SECRET_ANNOTATION] ? { secretName: a[IMPORT_SECRET_ANNOTATION] } : {};
  const invalid = (message: string): ImportDecision => ({ kind: 'invalid', message: `${IMPORT_ENDPOINT_ANNOTATION}: ${message}` });
  switch (source) {
    case 'http': {
      let url: URL;
      try {
        url = new URL(endpoint);
      } catch {
        return invalid(`"${endpoint}" is not a URL`);
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:')
        return invalid(`an http source needs an http or https URL, not ${url.protocol}`);
      return { kind: 'import', source: { kind: 'http', url: endpoint, ...secret } };
    }
    case 'registry': {
      if (!endpoint.startsWith(REGISTRY_ENDPOINT_PREFIX) || endpoint.length === REGISTRY_ENDPOINT_PREFIX.length)
        return invalid(`a registry source is ${REGISTRY_ENDPOINT_PREFIX}<image>, not "${endpoint}"`);
      return { kind: 'import', source: { kind: 'registry', image: endpoint.slice(REGISTRY_ENDPOINT_PREFIX.length), ...secret } };
    }
    default:
      return { kind: 'invalid', message: `${IMPORT_SOURCE_ANNOTATION}: "${source}" is not one of http, registry, none` };
  }
}

/** The last figure in `qemu-img convert -p` output (`    (45.20/100%)\r`), or undefined when the text holds none. */
export function lastProgress(text: string): number | undefined {
  const all = [...text.matchAll(/\((\d+(?:\.\d+)?)\/100%\)/g)];
  const last = all.at(-1);
  return last ? Number(last[1]) : undefined;
}

/**
 * How the vetted source becomes the disk. In a Filesystem volume a raw
 * download is the disk already, so it is renamed into place as disk.img: the
 * bytes pass once, from the socket into the volume. Anything else is
 * converted by qemu-img straight into the volume; a registry source stays
 * where it is, in the node's image store (other pods use it), so even a raw
 * one is copied. A Block volume is the device itself, so every source is
 * written onto it by qemu-img (`-n`: the device is there, not created).
 */
export function stagingOf(
  source: ImportSourceSpec['kind'],
  format: 'raw' | 'qcow2',
  volumeMode: ClaimDisk['volumeMode'],
): 'adopt-download' | 'convert' | 'onto-device' {
  if (volumeMode === 'Block') return 'onto-device';
  return source === 'http' && format === 'raw' ? 'adopt-download' : 'convert';
}

/** The share of a downloaded import's progress its download stands for; the local convert after it is the rest. */
export const DOWNLOAD_SHARE_PERCENT = 90;

/**
 * The import's overall percent from one stage's own: a download is 0–90 %
 * (its format is known only once it is in), a convert after a download
 * 90–100 %, a convert of a source already on the node 0–100 %. Never goes
 * back, so the claim's progress only rises.
 */
export function importPercent(stage: 'download' | 'convert', stagePercent: number, downloaded: boolean): number {
  const p = Math.min(100, Math.max(0, stagePercent));
  if (stage === 'download') return (p * DOWNLOAD_SHARE_PERCENT) / 100;
  return downloaded ? DOWNLOAD_SHARE_PERCENT + (p * (100 - DOWNLOAD_SHARE_PERCENT)) / 100 : p;
}

/** Passes on at most one report per `intervalMs`; a finished one (100) always. Pure but for the clock it is given. */
export class ProgressThrottle {
  private lastAtMs = -Infinity;
  private lastPercent = -1;

  constructor(
    private readonly intervalMs: number,
    private readonly nowMs: () => number,
  ) {}

  /** Whether `percent` should be reported now. */
  admit(percent: number): boolean {
    if (percent === this.lastPercent) return false;
    const now = this.nowMs();
    if (percent < 100 && now - this.lastAtMs < this.intervalMs) return false;
    this.lastAtMs = now;
    this.lastPercent = percent;
    return true;
  }
}

/**
 * Why an image's size does not fit the claim, or undefined when it does: the
 * claim's capacity (Filesystem) or its device's size (Block; never a
 * truncated disk). It names the claim's size field, which the DataVolume
 * controller turns into the DataVolume's own.
 */
export function sizeRefusal(
  virtualSizeBytes: number,
  limit: { bytes: number | undefined; of: 'capacity' | 'device' },
  claim: string,
): string | undefined {
  if (limit.bytes === undefined || virtualSizeBytes <= limit.bytes) return undefined;
  const mib = (n: number) => `${Math.ceil(n / 2 ** 20)} MiB`;
  const what = limit.of === 'device' ? `block device's size` : 'capacity';
  return `${CLAIM_SIZE_FIELD}: the image's virtual size, ${mib(virtualSizeBytes)}, is larger than claim "${claim}"'s ${what}, ${mib(limit.bytes)}`;
}

/**
 * Why a VMI's use of a claim is read-only, as the field to name, or
 * undefined when it may write: the VMI volume's own readOnly, the
 * PersistentVolume's, or a volume only ReadOnlyMany. As CDI, which imports
 * only through its own writable importer pod and never while another pod uses
 * the claim, an import never writes a volume published read-only.
 */
export function readOnlyField(o: {
  claim: string;
  pvName: string;
  /** The index of a VMI volume naming the claim read-only. */
  readOnlyVolume?: number;
  pvReadOnly: boolean;
  accessMode: CsiAccessMode;
}): string | undefined {
  if (o.readOnlyVolume !== undefined) return `spec.volumes[${o.readOnlyVolume}].persistentVolumeClaim.readOnly`;
  if (o.pvReadOnly) return `PersistentVolume ${o.pvName} spec.csi.readOnly`;
  if (o.accessMode === 'MULTI_NODE_READER_ONLY') return `claim "${o.claim}" spec.accessModes (ReadOnlyMany only)`;
  return undefined;
}

/**
 * The most an http download for a Block volume may bring: the device's size,
 * and room for a qcow2's own tables (at most 1/64 of its data, with 512-byte
 * clusters) and header. A larger image cannot fit; the vetted virtual size is
 * then checked exactly (sizeRefusal).
 */
export function downloadCapBytes(deviceBytes: number): number {
  return deviceBytes + Math.ceil(deviceBytes / 64) + 2 ** 20;
}

/** The refusal of a download that passed downloadCapBytes, naming the claim's size field. */
export function downloadRefusal(deviceBytes: number, claim: string): string {
  const mib = Math.ceil(deviceBytes / 2 ** 20);
  return `${CLAIM_SIZE_FIELD}: the image download is larger than claim "${claim}"'s block device's size, ${mib} MiB; the download was stopped`;
}
