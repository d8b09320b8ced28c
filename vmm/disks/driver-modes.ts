// A disk's host cache and AIO modes, decided as KubeVirt's virt-launcher
// decides them (converter.go, SetDriverCacheMode and SetOptimalIOMode):
// cache none (O_DIRECT: no second copy of the guest's data in the host's page
// cache, and what the guest flushed is on the device) where the disk's file
// system, and its backing file's, accept O_DIRECT; writethrough where not
// (tmpfs before Linux 6.6), never libvirt's default writeback. io native (Linux AIO) with cache
// none on a block device or a fully allocated file, where it does not block on
// allocation; QEMU's default (threads) otherwise. A mode the VMI set is kept,
// or refused naming its field when the host cannot give it. Pure: the facts
// are probed by direct-io.ts.
import { SpecError } from '../errors.js';
import type { DiskSpec } from '../spec.js';
import type { PreparedDisk } from '../domain/runtime.js';

export interface DiskFacts {
  block: boolean;
  /** The disk's path, and its backing file when it has one, open with O_DIRECT. */
  directIo: boolean;
  /** Every byte of the file is allocated (no hole to fill on a write); false where O_DIRECT does not open. */
  preallocated: boolean;
}

export function chooseDriverModes(disk: Pick<DiskSpec, 'cache' | 'io'>, facts: DiskFacts, at: string): PreparedDisk['modes'] {
  if (disk.cache === 'none' && !facts.directIo)
    throw new SpecError([
      {
        path: `${at}.cache`,
        reason: 'FieldValueInvalid',
        message: "cache none needs O_DIRECT, which this disk's file system on the node does not support",
      },
    ]);
  const cache = disk.cache ?? (facts.directIo ? 'none' : 'writethrough');
  if (disk.io === 'native' && cache !== 'none')
    throw new SpecError([
      {
        path: `${at}.io`,
        reason: 'FieldValueInvalid',
        message: `io native needs cache none (O_DIRECT); this disk's cache is ${cache} on the node`,
      },
    ]);
  const io = disk.io ?? (cache === 'none' && (facts.block || facts.preallocated) ? 'native' : undefined);
  return io ? { cache, io } : { cache };
}
