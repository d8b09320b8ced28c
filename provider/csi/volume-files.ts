// The files that hold volumes and snapshots: sparse raw images, made whole
// under a temporary name, fsynced and renamed into place, so a file at its
// final name is complete, after a host crash too. Copies (clones, snapshots, restores) go through
// `cp --reflink=auto`: on XFS or btrfs a copy-on-write clone that costs
// nothing whatever the size; elsewhere (ext4) a sparse copy of the bytes.
// Raw rather than qcow2: loop devices and QEMU's block and filesystem
// volumes (KubeVirt's disk.img) take raw files as they are.
import { execFile } from 'node:child_process';
import { open, rename, rm, truncate } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { fsyncPath } from '../atomic-file.js';

const execFileP = promisify(execFile);

/**
 * Makes `file` by `make(tmp)` under a temporary name, then renames it into place; nothing is left at either if it
 * fails. Durable when it resolves: the data is fsynced before the rename and the directory after, so the record
 * the caller writes next never names a file a host crash could leave torn or missing (for a reflink clone the
 * fsync writes only the extent map).
 */
async function makeWhole(file: string, make: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${file}.${process.pid}.partial`;
  try {
    await make(tmp);
    await fsyncPath(tmp);
    await rename(tmp, file);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await fsyncPath(dirname(file));
}

/** A sparse file of `sizeBytes`, 0600. */
export async function createSparse(file: string, sizeBytes: number): Promise<void> {
  await makeWhole(file, async (tmp) => {
    const fh = await open(tmp, 'wx', 0o600);
    try {
      await fh.truncate(sizeBytes);
    } finally {
      await fh.close();
    }
  });
}

/** A copy of `source` at `file`, grown to `sizeBytes` if that is larger; copy-on-write where the filesystem can. */
export async function copyVolumeFile(source: string, file: string, sizeBytes: number): Promise<void> {
  await makeWhole(file, async (tmp) => {
    await execFileP('cp', ['--reflink=auto', '--sparse=always', '--no-preserve=all', source, tmp]);
    const fh = await open(tmp, 'r+');
    try {
      if ((await fh.stat()).size < sizeBytes) await fh.truncate(sizeBytes);
      await fh.chmod(0o600);
    } finally {
      await fh.close();
    }
  });
}

export async function growFile(file: string, sizeBytes: number): Promise<void> {
  await truncate(file, sizeBytes);
}

export async function removeFile(file: string): Promise<void> {
  await rm(file, { force: true });
}
