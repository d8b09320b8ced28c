// Whether a ResizeDisk request grows a disk (launcher.proto): only a disk the
// VM uses in place (a `host` source: a PersistentVolume's file or device),
// only larger. QEMU's block_resize would also shrink a raw disk under the
// guest's filesystem, so a smaller size is refused. The same size is asked of
// QEMU again: libvirt may report a grown device's new size before QEMU told
// the guest, and block_resize to the size QEMU has changes nothing. Pure.
import type { VmSpec } from '../vmm/spec.js';
import { InvalidArgumentError } from './errors.js';

/** Refuses a resize that is not a growth of a disk the VM uses in place. */
export function checkDiskResize(spec: VmSpec | undefined, path: string, currentBytes: number | undefined, sizeBytes: number): void {
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0)
    throw new InvalidArgumentError(`size_bytes: ${sizeBytes} is not a positive size`, ['sizeBytes']);
  const disk = spec?.disks.find((d) => d.source.kind === 'host' && d.source.path === path);
  if (!disk) throw new InvalidArgumentError(`path: ${JSON.stringify(path)} is no disk the VM uses in place`, ['path']);
  if (currentBytes !== undefined && sizeBytes < currentBytes)
    throw new InvalidArgumentError(`size_bytes: ${sizeBytes} is below disk ${disk.name}'s ${currentBytes} bytes; disks never shrink`, [
      'sizeBytes',
    ]);
}
