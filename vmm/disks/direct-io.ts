// The host facts chooseDriverModes needs, probed on the paths QEMU will open:
// whether their file system takes O_DIRECT (tmpfs before Linux 6.6 does not:
// open fails with EINVAL, as QEMU's own probe and KubeVirt's check it) and whether a file is
// fully allocated.
import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import type { DiskFacts } from './driver-modes.js';

/** Whether `path` opens with O_DIRECT. Any other failure is also no (KubeVirt's fallback): QEMU then opens it without. */
export async function opensWithDirectIo(path: string): Promise<boolean> {
  try {
    await (await open(path, constants.O_RDONLY | constants.O_DIRECT)).close();
    return true;
  } catch {
    return false;
  }
}

/** `backing`: the base image under an overlay, read through the same QEMU block layer. */
export async function probeDiskFacts(disk: { path: string; block?: boolean; format: string }, backing?: string): Promise<DiskFacts> {
  const [own, base] = await Promise.all([opensWithDirectIo(disk.path), backing ? opensWithDirectIo(backing) : true]);
  // Only raw files can be preallocated here: the qcow2 overlays and empty disks vkvm makes are sparse.
  const preallocated =
    !disk.block &&
    disk.format === 'raw' &&
    (await stat(disk.path).then(
      (s) => s.blocks * 512 >= s.size,
      () => false,
    ));
  return { block: disk.block === true, directIo: own && base, preallocated };
}
