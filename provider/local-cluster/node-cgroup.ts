// The cgroup subtree a container node owns, in every hierarchy this machine
// mounts: its daemons (containerd and its shims, the kubelet, flanneld) in
// <base>/daemons, its pods below <base>/pods (the kubelet's cgroupRoot). The
// shims outlive containerd by design and the kubelet leaves its pods running
// when it stops, so a stop kills what the subtree still holds, then removes it.
import { readdir, readFile, rmdir, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CgroupMounts } from './cgroup-mounts.js';

export interface NodeCgroup {
  /** Relative to each hierarchy's root, e.g. vkvm/cnode-3. */
  base: string;
  hierarchies: string[];
}

export const nodeCgroupOf = (base: string, mounts: CgroupMounts): NodeCgroup => ({
  base,
  hierarchies: mounts.hierarchies.map((h) => h.path),
});

/** The kubelet's cgroupRoot (absolute, as it wants it). */
export const podsCgroup = (cg: NodeCgroup): string => `/${cg.base}/pods`;

/** Creates <base>/daemons and <base>/pods everywhere and moves `pid` (and so its later children) into daemons. */
export async function enterNodeCgroup(cg: NodeCgroup, pid: number): Promise<void> {
  for (const h of cg.hierarchies) {
    await mkdir(join(h, cg.base, 'pods'), { recursive: true });
    await mkdir(join(h, cg.base, 'daemons'), { recursive: true });
    for (const leaf of ['pods', 'daemons']) await inheritCpuset(h, `${cg.base}/${leaf}`);
    await writeFile(join(h, cg.base, 'daemons', 'cgroup.procs'), String(pid));
  }
}

/**
 * cpuset's (v1) new cgroups start with no cpus and mems and refuse tasks
 * (ENOSPC) until given some: each level from the root down to `rel` that has
 * none takes its parent's.
 */
async function inheritCpuset(h: string, rel: string): Promise<void> {
  const parts = rel.split('/');
  for (let i = 1; i <= parts.length; i++) {
    const dir = join(h, ...parts.slice(0, i));
    for (const f of ['cpuset.cpus', 'cpuset.mems']) {
      const own = await readFile(join(dir, f), 'utf8').catch(() => undefined);
      if (own === undefined || own.trim() !== '') continue;
      const parentValue = (await readFile(join(dir, '..', f), 'utf8')).trim();
      await writeFile(join(dir, f), parentValue);
    }
  }
}

/** Every directory of the subtree in `h`, deepest first. */
async function subtree(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const below = await Promise.all(entries.filter((e) => e.isDirectory()).map((e) => subtree(join(dir, e.name))));
  return [...below.flat(), dir];
}

async function pidsIn(dirs: string[]): Promise<number[]> {
  const out = new Set<number>();
  for (const d of dirs) {
    const text = await readFile(join(d, 'cgroup.procs'), 'utf8').catch(() => '');
    for (const p of text.split('\n').filter(Boolean)) out.add(Number(p));
  }
  return [...out];
}

/**
 * Kills every process of the subtree but `self` (moved to each hierarchy's
 * root first), then removes the subtree. Bounded: processes in the kernel
 * after SIGKILL leave within moments; after `timeoutMs` it throws, naming them.
 */
export async function removeNodeCgroup(cg: NodeCgroup, self: number, timeoutMs = 20_000): Promise<void> {
  for (const h of cg.hierarchies) await writeFile(join(h, 'cgroup.procs'), String(self)).catch(() => undefined);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const dirs = (await Promise.all(cg.hierarchies.map((h) => subtree(join(h, cg.base))))).flat();
    const pids = (await pidsIn(dirs)).filter((p) => p !== self);
    if (pids.length === 0) {
      for (const d of dirs) await rmdir(d).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? undefined : Promise.reject(err)));
      return;
    }
    if (Date.now() > deadline) throw new Error(`cgroup ${cg.base} still holds processes ${pids.join(',')}`);
    for (const p of pids) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
