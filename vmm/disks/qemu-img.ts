// The qemu-img calls disk preparation needs. Formats are always passed
// explicitly (-F) so QEMU never guesses the format of a backing file.
import { run } from '../exec.js';

export interface ImageInfo {
  format: string;
  virtualSizeBytes: number;
  /** The image's own backing file, as written in its header. */
  backingFile?: string;
  /** A qcow2 external data file, which holds the guest data outside the image. */
  dataFile?: string;
}

interface QemuImgInfoJson {
  format: string;
  'virtual-size': number;
  'backing-filename'?: string;
  'format-specific'?: { data?: { 'data-file'?: string } };
}

/** Reads an image's header; qemu-img info does not open the backing chain. */
export async function readImageInfo(path: string): Promise<ImageInfo> {
  const info = JSON.parse(await run('qemu-img', ['info', '--output=json', path])) as QemuImgInfoJson;
  return {
    format: info.format,
    virtualSizeBytes: info['virtual-size'],
    backingFile: info['backing-filename'],
    dataFile: info['format-specific']?.data?.['data-file'],
  };
}

/** A qcow2 overlay: the VM writes here and the base stays untouched, so many VMs can share one base. */
export async function createOverlay(basePath: string, baseFormat: string, path: string): Promise<void> {
  await run('qemu-img', ['create', '-f', 'qcow2', '-F', baseFormat, '-b', basePath, path]);
}

/** A qcow2 file allocates on write, so an empty disk of any size starts a few hundred KiB on the host. */
export async function createEmptyDisk(path: string, sizeMiB: number): Promise<void> {
  await run('qemu-img', ['create', '-f', 'qcow2', path, `${sizeMiB}M`]);
}
