// The host facts chooseDriverModes needs, probed on the paths QEMU will open:
// whether their file system takes O_DIRECT (tmpfs before Linux 6.6 does not:
// open fails with EINVAL, as QEMU's own probe and KubeVirt's check it) and whether a file is
// fully allocated. One open(2) and one fstat(2) per path, in the launcher's process: no helper process.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { DiskFacts } from './driver-modes.js';

/**
 * Whether `path` opens with O_DIRECT, and then whether every byte of it is allocated. Any other failure is also no
 * (KubeVirt's fallback): QEMU then opens it without. O_NONBLOCK: a FIFO put at a disk's path (a claim's disk.img is
 * its owner's to replace) would otherwise hold the open, and the VM's start, until something wrote to it.
 */
async function openDirect(path: string): Promise<{ directIo: false } | { directIo: true; allocated: boolean }> {
  const fd = await open(path, constants.O_RDONLY | constants.O_DIRECT | constants.O_NONBLOCK).catch(() => undefined);
  if (!fd) return { directIo: false };
  try {
    const s = await fd.stat();
    return { directIo: true, allocated: s.blocks * 512 >= s.size };
  } finally {
    await fd.close();
  }
}

/** `backing`: the base image under an overlay, read through the same QEMU block layer. */
export async function probeDiskFacts(disk: { path: string; block?: boolean; format: string }, backing?: string): Promise<DiskFacts> {
  const [own, base] = await Promise.all([openDirect(disk.path), backing ? openDirect(backing) : { directIo: true }]);
  // Only raw files can be preallocated here: the qcow2 overlays and empty disks vkvm makes are sparse. Known only
  // where O_DIRECT opens, the only case it matters in (io native needs cache none).
  const preallocated = own.directIo && !disk.block && disk.format === 'raw' && own.allocated;
  return { block: disk.block === true, directIo: own.directIo && base.directIo, preallocated };
}
