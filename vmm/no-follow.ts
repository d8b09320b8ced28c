// Root's way into a directory QEMU's uid can write (a VM's socket and disk
// directories): QEMU, after a guest escape, may put a symlink (or a hard link)
// there in place of any name, and root following it would connect to, chown
// or chmod whatever it points at. Every name is opened once without following
// a link, checked on the open file, and used only through that file.
import { constants, type Stats } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';

/**
 * Linux's O_PATH (x86_64 and arm64): an fd naming the inode without opening
 * it, so a socket can be checked before connecting. Node does not export it
 * on every version. With O_NOFOLLOW it names a symlink itself, never its target.
 */
const O_PATH = 0o10000000;

/** A name in a QEMU-writable directory is not what root may use: a link planted there, or a file of the wrong kind or owner. */
export class UnsafePathError extends Error {
  readonly kind = 'UnsafePathError';
}

function refuseLink(path: string, stats: Stats): void {
  if (stats.isSymbolicLink()) throw new UnsafePathError(`${path} is a symlink; refusing to follow it`);
  // One more name for the same inode was made by someone other than its creator (QEMU linking a file of root's).
  if (!stats.isDirectory() && stats.nlink !== 1) throw new UnsafePathError(`${path} has ${stats.nlink} hard links; refusing it`);
}

export interface ConnectOptions {
  /** The uids the socket may be owned by: whoever legitimately binds it. */
  owners: readonly number[];
  /** As net.connect's. */
  allowHalfOpen?: boolean;
}

/**
 * Connects to the unix socket at `path` only if it is a socket (not a link to
 * one) owned by one of `owners`: checked on an O_PATH fd, then connected
 * through /proc/self/fd, so the checked inode is the one connected to.
 * ENOENT keeps its code, so callers can tell "not listening".
 */
export async function connectNoFollow(path: string, { owners, allowHalfOpen = false }: ConnectOptions): Promise<Socket> {
  const file = await open(path, O_PATH | constants.O_NOFOLLOW);
  try {
    const stats = await file.stat();
    refuseLink(path, stats);
    if (!stats.isSocket()) throw new UnsafePathError(`${path} is not a unix socket; refusing to connect`);
    if (!owners.includes(stats.uid)) {
      throw new UnsafePathError(`${path} is owned by uid ${stats.uid}, not ${owners.join(' or ')}; refusing to connect`);
    }
    return await new Promise<Socket>((resolve, reject) => {
      const socket = connect({ path: `/proc/self/fd/${file.fd}`, allowHalfOpen });
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(socket);
      });
    });
  } finally {
    await file.close();
  }
}

/** The file or directory at `path`, opened without following a link (O_NONBLOCK: a FIFO planted there cannot hang us). */
async function openNoFollow(path: string): Promise<FileHandle> {
  try {
    return await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP')
      throw new UnsafePathError(`${path} is a symlink; refusing to follow it`, { cause: err });
    throw err;
  }
}

/**
 * Gives the regular file or directory at `path` to `owner` with `mode`,
 * through an fd opened without following a link: a symlink, a hard link or
 * anything else planted in its place is refused, never changed.
 */
export async function chownNoFollow(path: string, owner: { uid: number; gid: number }, mode: number): Promise<void> {
  const file = await openNoFollow(path);
  try {
    const stats = await file.stat();
    refuseLink(path, stats);
    if (!stats.isFile() && !stats.isDirectory())
      throw new UnsafePathError(`${path} is neither a regular file nor a directory; refusing it`);
    await file.chown(owner.uid, owner.gid);
    await file.chmod(mode);
  } finally {
    await file.close();
  }
}
