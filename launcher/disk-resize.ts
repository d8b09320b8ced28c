// Whether a ResizeDisk request grows a disk (launcher.proto): only a disk the
// VM uses in place (a `host` source: a PersistentVolume's file or device),
// only larger. QEMU's block_resize would also shrink a raw disk under the
// guest's filesystem, so a smaller size is refused, and the same size is done
// already (a retry). Pure.
import type { VmSpec } from '../vmm/spec.js';
import { InvalidArgumentError } from './errors.js';

export type DiskResize = { kind: 'done' } | { kind: 'grow' };

export function diskResize(spec: VmSpec | undefined, path: string, currentBytes: number | undefined, sizeBytes: number): DiskResize {
  if (!Number.isSafeInteger(sizeBytes) || sizeBytes <= 0)
    throw new InvalidArgumentError(`size_bytes: ${sizeBytes} is not a positive size`, ['sizeBytes']);
  const disk = spec?.disks.find((d) => d.source.kind === 'host' && d.source.path === path);
  if (!disk) throw new InvalidArgumentError(`path: ${JSON.stringify(path)} is no disk the VM uses in place`, ['path']);
  if (currentBytes === undefined || currentBytes === sizeBytes) return currentBytes === undefined ? { kind: 'grow' } : { kind: 'done' };
  if (sizeBytes < currentBytes)
    throw new InvalidArgumentError(`size_bytes: ${sizeBytes} is below disk ${disk.name}'s ${currentBytes} bytes; disks never shrink`, [
      'sizeBytes',
    ]);
  return { kind: 'grow' };
}
