// The node's tools over volume files: loop devices (util-linux losetup),
// filesystems (e2fsprogs), mounts and the kernel's mount table. Thin shells;
// the parsers are pure and tested.
import { execFile } from 'node:child_process';
import { readFile, statfs } from 'node:fs/promises';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

async function run(cmd: string, args: string[]): Promise<string> {
  try {
    return (await execFileP(cmd, args, { maxBuffer: 4 << 20 })).stdout;
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    const said = `${e.stdout ?? ''}\n${e.stderr ?? ''}`.trim();
    throw new Error(`${cmd} ${args.join(' ')}: ${said || e.message}`, { cause: err });
  }
}

/** `losetup --json --list` → device → backing file. */
export function parseLoopDevices(json: string): Array<{ device: string; backingFile: string }> {
  if (!json.trim()) return [];
  const parsed = JSON.parse(json) as { loopdevices?: Array<{ name: string; 'back-file'?: string | null }> };
  return (parsed.loopdevices ?? []).map((d) => ({ device: d.name, backingFile: (d['back-file'] ?? '').replace(/ \(deleted\)$/, '') }));
}

/** The mount points in /proc/self/mountinfo (field 5, octal escapes undone). */
export function parseMountPoints(mountinfo: string): Set<string> {
  const points = new Set<string>();
  for (const line of mountinfo.split('\n')) {
    const field = line.split(' ')[4];
    if (field) points.add(field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
  }
  return points;
}

export async function loopDevicesOf(file: string): Promise<string[]> {
  const all = parseLoopDevices(await run('losetup', ['--json', '--list']));
  return all.filter((d) => d.backingFile === file).map((d) => d.device);
}

/** The loop device over `file`: one already there (after a crash mid-stage) or a new one. */
export async function attachLoop(file: string, readonly: boolean): Promise<string> {
  const existing = await loopDevicesOf(file);
  if (existing[0]) return existing[0];
  // Direct I/O: the guest's page cache is the one that counts, not a second copy in the host's.
  const args = ['--find', '--show', '--direct-io=on', ...(readonly ? ['--read-only'] : []), file];
  return (await run('losetup', args)).trim();
}

export async function detachLoops(file: string): Promise<void> {
  for (const device of await loopDevicesOf(file)) await run('losetup', ['--detach', device]);
}

/** After the file grew: the loop device takes its new size. */
export async function refreshLoop(device: string): Promise<void> {
  await run('losetup', ['--set-capacity', device]);
}

export async function hasFilesystem(device: string): Promise<boolean> {
  try {
    await execFileP('blkid', ['--probe', '--match-tag', 'TYPE', '--output', 'value', device]);
    return true;
  } catch (err) {
    // blkid exits 2 when it finds nothing.
    if ((err as { code?: number }).code === 2) return false;
    throw err;
  }
}

export async function makeFilesystem(device: string, fsType: string): Promise<void> {
  // 4 KiB blocks whatever the size: the disk images KubeVirt puts in it are read in 4 KiB pages.
  await run(`mkfs.${fsType}`, ['-q', '-F', '-b', '4096', device]);
}

/** `dumpe2fs -h`: the filesystem's size in bytes (block count × block size). */
export function parseExtSize(header: string): number | undefined {
  const count = /^Block count:\s+(\d+)$/m.exec(header)?.[1];
  const size = /^Block size:\s+(\d+)$/m.exec(header)?.[1];
  return count && size ? Number(count) * Number(size) : undefined;
}

export async function deviceBytes(device: string): Promise<number> {
  return Number((await run('blockdev', ['--getsize64', device])).trim());
}

/**
 * Grows an unmounted ext4 to its device's size when it is smaller (a volume
 * expanded while unstaged, or cloned or restored larger than its source).
 * Offline, after the check resize2fs asks for: it needs no privilege beyond
 * the device, where an online resize needs CAP_SYS_RESOURCE.
 */
export async function growFilesystemOffline(device: string): Promise<boolean> {
  const fsBytes = parseExtSize(await run('dumpe2fs', ['-h', device]));
  if (fsBytes === undefined || fsBytes >= (await deviceBytes(device))) return false;
  await run('e2fsck', ['-f', '-p', device]);
  await run('resize2fs', [device]);
  return true;
}

/** Grows a mounted ext4 to its device's size (online; nothing to do when it already fills it). */
/**
 * Grows a mounted ext4 to its device. Returns false when the kernel refuses for want of CAP_SYS_RESOURCE (a
 * sandbox that drops it; a host's root has it): the filesystem then grows offline at the next stage (§3).
 */
export async function growFilesystemOnline(device: string): Promise<boolean> {
  try {
    await run('resize2fs', [device]);
    return true;
  } catch (err) {
    if (/Permission denied to resize filesystem/.test((err as Error).message)) return false;
    throw err;
  }
}

export async function mountPoints(): Promise<Set<string>> {
  return parseMountPoints(await readFile('/proc/self/mountinfo', 'utf8'));
}

export async function isMountPoint(target: string): Promise<boolean> {
  return (await mountPoints()).has(target);
}

export async function mountDevice(
  device: string,
  target: string,
  fsType: string,
  flags: readonly string[],
  readonly: boolean,
): Promise<void> {
  const options = [...flags, ...(readonly ? ['ro'] : [])];
  await run('mount', ['-t', fsType, ...(options.length ? ['-o', options.join(',')] : []), device, target]);
}

export async function bindMount(source: string, target: string, readonly: boolean): Promise<void> {
  await run('mount', ['--bind', source, target]);
  if (readonly) await run('mount', ['-o', 'remount,bind,ro', target]);
}

export async function unmount(target: string): Promise<void> {
  await run('umount', [target]);
}

export interface FsUsage {
  totalBytes: number;
  availableBytes: number;
  usedBytes: number;
  totalInodes: number;
  freeInodes: number;
}

export async function filesystemUsage(path: string): Promise<FsUsage> {
  const s = await statfs(path);
  return {
    totalBytes: s.blocks * s.bsize,
    availableBytes: s.bavail * s.bsize,
    usedBytes: (s.blocks - s.bfree) * s.bsize,
    totalInodes: s.files,
    freeInodes: s.ffree,
  };
}

/** Runs `fn` with the filesystem mounted at `mountPoint` frozen (none: as is), thawed however it ends. */
export async function frozenWhile<T>(mountPoint: string | undefined, fn: () => Promise<T>): Promise<T> {
  if (!mountPoint) return fn();
  await run('fsfreeze', ['--freeze', mountPoint]);
  try {
    return await fn();
  } finally {
    await run('fsfreeze', ['--unfreeze', mountPoint]);
  }
}
