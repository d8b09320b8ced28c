// An import's http download, readable while it lands, so qemu-img converts
// as the bytes arrive instead of after the last one (#27: the two one after
// the other held the import to 0.66x of qemu-img reading the URL itself).
// The download itself is the node's, under its URL policy (the address
// checked is the one connected to); qemu-img reads only the node's copy,
// through a read-only NBD export (vmm/disks/nbd-export.ts) whose reads wait
// for their bytes (vmm/disks/growing-file.ts), never the URL.
import { open, type FileHandle } from 'node:fs/promises';
import type { Logger } from '../log.js';
import type { DownloadProgress } from '../../vmm/disks/download.js';
import { GrowingFile } from '../../vmm/disks/growing-file.js';
import { exportOverNbd, type NbdExport } from '../../vmm/disks/nbd-export.js';

export type Download = (url: string, dest: string, log: Logger, signal?: AbortSignal, onProgress?: DownloadProgress) => Promise<number>;

export interface LandingDownload {
  /** What qemu-img reads: the export of the file as it lands, or the finished file when the server did not say its size. */
  readonly input: string;
  /** The download's end: its byte count, or its error. */
  readonly finished: Promise<number>;
  /** The download's error if it has failed already: the import's reason, rather than the I/O error of a reader it failed under. */
  failure(): Error | undefined;
  /** Stops the download if it still runs, waits for it to end and stops serving it; idempotent. */
  close(): Promise<void>;
}

/** Starts downloading `url` into `dest`; resolves once the download can be read (its size is known) or has ended. */
export async function landDownload(
  download: Download,
  url: string,
  dest: string,
  log: Logger,
  signal: AbortSignal | undefined,
  onProgress: DownloadProgress,
): Promise<LandingDownload> {
  const stop = new AbortController();
  let landed = 0;
  let growing: GrowingFile | undefined;
  let sized: (total: number) => void = () => undefined;
  const knownSize = new Promise<number>((resolve) => (sized = resolve));
  const finished = download(url, dest, log, signal ? AbortSignal.any([signal, stop.signal]) : stop.signal, (bytes, total) => {
    landed = bytes;
    growing?.landedUpTo(bytes);
    if (total !== undefined) sized(total);
    onProgress(bytes, total);
  });
  let failed: Error | undefined;
  const ended = finished.then(
    () => undefined,
    (err: Error) => (failed = err),
  );
  let fh: FileHandle | undefined;
  let served: NbdExport | undefined;
  const close = async () => {
    stop.abort();
    await ended;
    await served?.close();
    await fh?.close();
    served = undefined;
    fh = undefined;
  };
  const common = { finished, failure: () => failed, close };
  // Progress comes only after a write, so a sized download's file exists.
  const total = await Promise.race([knownSize, ended.then(() => undefined)]);
  if (total === undefined) return { input: dest, ...common };
  try {
    fh = await open(dest, 'r');
    const file = new GrowingFile(fh, total);
    file.landedUpTo(landed);
    growing = file;
    // A read of bytes that never landed fails rather than waits, however the download ended.
    void ended.then((err) => file.fail(err ?? new Error(`the download ended after ${landed} of ${total} bytes`)));
    served = await exportOverNbd(file);
    return { input: served.url, ...common };
  } catch (err) {
    await close();
    throw err;
  }
}
