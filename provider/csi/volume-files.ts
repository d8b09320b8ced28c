// The files that hold volumes and snapshots: sparse raw images, made whole
// under a temporary name and renamed into place, so a file at its final name
// is complete. Copies (clones, snapshots, restores) are first a copy-on-write
// clone (`cp --reflink=always`, FICLONE): on XFS or btrfs it costs nothing
// whatever the size. Where the filesystem cannot (ext4) they are a byte copy
// by `qemu-img convert` (QEMU is on every node): it skips the source's holes
// (SEEK_DATA/SEEK_HOLE) and leaves zeros as holes, as cp --sparse=always did,
// reads and writes with O_DIRECT, several requests in flight, and
// fdatasyncs, so the copy is on disk when it returns (cp, through the page
// cache, left it all dirty) and uses no page-cache memory on the way
// (docs/benchmarks-log.md, #27).
// Raw rather than qcow2: loop devices and QEMU's block and filesystem
// volumes (KubeVirt's disk.img) take raw files as they are.
import { execFile } from 'node:child_process';
import { open, rename, rm, truncate } from 'node:fs/promises';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

/** Makes `file` by `make(tmp)` under a temporary name, then renames it into place; nothing is left at either if it fails. */
async function makeWhole(file: string, make: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${file}.${process.pid}.partial`;
  try {
    await make(tmp);
    await rename(tmp, file);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
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
    await cloneOrCopy(source, tmp);
    const fh = await open(tmp, 'r+');
    try {
      if ((await fh.stat()).size < sizeBytes) await fh.truncate(sizeBytes);
      await fh.chmod(0o600);
    } finally {
      await fh.close();
    }
  });
}

/** A copy-on-write clone of `source` at `to` where the filesystem can make one, else a byte copy. */
async function cloneOrCopy(source: string, to: string): Promise<void> {
  try {
    await execFileP('cp', ['--reflink=always', '--no-preserve=all', source, to]);
    return;
  } catch (err) {
    // cp says "failed to clone" when the filesystem has no FICLONE (EOPNOTSUPP) or the files are on two (EXDEV).
    if (!/failed to clone/.test(String((err as { stderr?: unknown }).stderr))) throw err;
  }
  // -W: writes out of order; -m 8: eight requests in flight; -t/-T none: O_DIRECT on both sides.
  await execFileP('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'raw', '-t', 'none', '-T', 'none', '-W', '-m', '8', source, to]);
}

export async function growFile(file: string, sizeBytes: number): Promise<void> {
  await truncate(file, sizeBytes);
}

export async function removeFile(file: string): Promise<void> {
  await rm(file, { force: true });
}
