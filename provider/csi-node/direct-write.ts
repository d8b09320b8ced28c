// How qemu-img writes an import into a volume: with O_DIRECT (`-t none`)
// where the volume takes it, so the bytes reach the disk while qemu-img
// converts and the fsync that marks the import complete finds nothing left to
// write; through the page cache where it does not (tmpfs before Linux 6.6),
// the fsync then writing it all at the end.
import { constants } from 'node:fs';
import { open, rm } from 'node:fs/promises';

/**
 * qemu-img's output cache flags for `path`: a device (`existing`) or a file
 * qemu-img will create. Probed by one open with O_DIRECT; a file made for
 * the probe is removed. O_NONBLOCK: a FIFO at the path must not hold the import.
 */
export async function importWriteCache(path: string, existing: boolean): Promise<string[]> {
  const create = existing ? 0 : constants.O_CREAT | constants.O_EXCL;
  const fd = await open(path, constants.O_WRONLY | constants.O_DIRECT | constants.O_NONBLOCK | create, 0o600).catch(() => undefined);
  if (!fd) return [];
  await fd.close();
  if (!existing) await rm(path, { force: true });
  return ['-t', 'none'];
}
