// The base image under a VM's overlay: downloaded into the shared cache when
// it comes from a URL, and vetted before any overlay points at it.
import { DownloadError, SpecError, type SpecCauseReason } from '../errors.js';
import type { Log } from '../log.js';
import type { DiskFormat } from '../domain/runtime.js';
import type { DownloadPolicy } from './download-policy.js';
import { cachedImage } from './image-cache.js';
import { readImageInfo } from './qemu-img.js';

const specError = (path: string, reason: SpecCauseReason, message: string) => new SpecError([{ path, reason, message }]);

/**
 * The base image's format. Every base image is untrusted, downloaded or named
 * by path: a backing file or an external data file in its header could name
 * any file on the host, and the overlay would then expose it to the guest.
 * KubeVirt accepts containerDisks on the same terms (qcow2 without a backing
 * file, or raw).
 */
export async function baseFormat(path: string, at: string): Promise<DiskFormat> {
  return (await vetBaseImage(path, at)).format;
}

/** baseFormat's checks with the image's virtual size, from the one `qemu-img info`. */
export async function vetBaseImage(path: string, at: string): Promise<{ format: DiskFormat; virtualSizeBytes: number }> {
  const info = await readImageInfo(path);
  if (info.format !== 'qcow2' && info.format !== 'raw') {
    throw specError(at, 'FieldValueNotSupported', `image format ${info.format} is not supported (use qcow2 or raw)`);
  }
  if (info.backingFile || info.dataFile) {
    throw specError(at, 'FieldValueInvalid', 'a base image must not refer to other files (backing or data file)');
  }
  return { format: info.format, virtualSizeBytes: info.virtualSizeBytes };
}

/** The cached copy of `url`; a download the server refused for good becomes a SpecError at `at`. */
export async function downloadBase(
  url: string,
  at: string,
  cacheDir: string,
  policy: DownloadPolicy,
  log: Log,
  signal?: AbortSignal,
): Promise<string> {
  try {
    return await cachedImage(url, cacheDir, policy, log, signal);
  } catch (err) {
    if (err instanceof DownloadError && err.permanent)
      throw new SpecError([{ path: at, reason: err.permanent, message: err.message }], { cause: err });
    // A 4xx other than timeout or rate limit will not go away on retry: the spec names a wrong URL.
    const status = err instanceof DownloadError ? err.status : undefined;
    if (status === undefined || status < 400 || status >= 500 || status === 408 || status === 429) throw err;
    const reason = status === 404 || status === 410 ? 'FieldValueNotFound' : 'FieldValueInvalid';
    throw new SpecError([{ path: at, reason, message: (err as Error).message }], { cause: err });
  }
}
