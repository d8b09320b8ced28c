// The cgroup hierarchies as this host mounts them, carried into a simulated
// host: `ip netns exec` mounts a fresh sysfs on /sys (so /sys/class/net
// shows the namespace's interfaces), which hides /sys/fs/cgroup and the
// hierarchies below it. Mounting a hierarchy again with the same
// controllers yields the same hierarchy, so the node's launchers see the
// cgroups this host's do.
import { readdir, readFile, readlink, mkdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../network/host.js';

export const CGROUP_ROOT = '/sys/fs/cgroup';

export interface CgroupMounts {
  /** /sys/fs/cgroup is a tmpfs holding the hierarchies (cgroup v1, or hybrid). */
  rootIsTmpfs: boolean;
  /** Each hierarchy: where, which filesystem, which mount options. */
  hierarchies: Array<{ path: string; fstype: 'cgroup' | 'cgroup2'; options: string }>;
  /** Symlinks beside them (cpu -> cpu,cpuacct). */
  links: Array<{ path: string; target: string }>;
}

/** Pure: the cgroup mounts of a /proc/<pid>/mountinfo. */
export function parseCgroupMounts(mountinfo: string): Omit<CgroupMounts, 'links'> {
  let rootIsTmpfs = false;
  const hierarchies: CgroupMounts['hierarchies'] = [];
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    const mountPoint = left?.split(' ')[4];
    const [fstype, , superOptions = ''] = right?.split(' ') ?? [];
    if (!mountPoint || (mountPoint !== CGROUP_ROOT && !mountPoint.startsWith(`${CGROUP_ROOT}/`))) continue;
    if (mountPoint === CGROUP_ROOT && fstype === 'tmpfs') rootIsTmpfs = true;
    if (fstype !== 'cgroup' && fstype !== 'cgroup2') continue;
    const options = superOptions.split(',').filter((o) => o !== 'rw' && o !== 'ro');
    // A named hierarchy without controllers must say so, or the kernel would attach every free controller.
    if (fstype === 'cgroup' && options.every((o) => o.startsWith('name=') || o.startsWith('release_agent'))) options.unshift('none');
    hierarchies.push({ path: mountPoint, fstype, options: options.join(',') });
  }
  return { rootIsTmpfs, hierarchies };
}

/** This process's cgroup mounts (read on this host, before any namespace). */
export async function cgroupMounts(): Promise<CgroupMounts> {
  const parsed = parseCgroupMounts(await readFile('/proc/self/mountinfo', 'utf8'));
  const links: CgroupMounts['links'] = [];
  for (const entry of await readdir(CGROUP_ROOT, { withFileTypes: true }).catch(() => [])) {
    if (entry.isSymbolicLink()) links.push({ path: join(CGROUP_ROOT, entry.name), target: await readlink(join(CGROUP_ROOT, entry.name)) });
  }
  return { ...parsed, links };
}

/** Mounts them again under the namespace's fresh /sys. */
export async function restoreCgroupMounts(m: CgroupMounts): Promise<void> {
  if (m.rootIsTmpfs) await run(['mount', '-t', 'tmpfs', '-o', 'mode=0755', 'tmpfs', CGROUP_ROOT]);
  for (const h of m.hierarchies) {
    await mkdir(h.path, { recursive: true });
    await run(['mount', '-t', h.fstype, ...(h.options ? ['-o', h.options] : []), h.fstype, h.path]);
  }
  for (const l of m.links) await symlink(l.target, l.path);
}
