// The launcher's own cgroup: <parent>/<uid> in cgroup v2 when the unified
// hierarchy offers the memory, cpu and pids controllers, otherwise in each v1
// controller hierarchy (memory, cpu, pids, and cpuacct where it is mounted on
// its own, for CPU accounting). The launcher enters it first, so libvirtd and
// QEMU (children of children) are born inside it. usage.ts reads it.
import { access, mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { cpuSharesToWeight } from './cpu-shares.js';

const CONTROLLERS = ['memory', 'cpu', 'pids'] as const;
type Controller = (typeof CONTROLLERS)[number];
/** v1 only: CPU accounting, optional because it is often co-mounted with cpu ("cpu,cpuacct"). */
type V1Controller = Controller | 'cpuacct';

export const DEFAULT_CGROUP_ROOT = '/sys/fs/cgroup';

export interface CgroupLimits {
  memoryBytes: number;
  /** Absent: no CPU quota. */
  cpuMillicores?: number;
  cpuWeight: CpuWeight;
  pidsMax: number;
}

/**
 * The system's default weight (v1 1024 shares, v2 weight 100), or a CPU request as v1 CPU shares (v2's
 * cpu.weight is derived from them, as the kubelet does). run-cpu-weight.ts says which applies when.
 */
export type CpuWeight = 'default' | { shares: number };

/** CFS period the CPU quota is expressed in (the kernel default). */
const CPU_PERIOD_US = 100_000;

export interface CgroupOptions {
  uid: string;
  /** Path below each hierarchy's root, e.g. "vkvm". */
  parent: string;
  /** Where the hierarchies are mounted; tests pass a scratch dir. */
  root?: string;
  /** The process whose original cgroup is restored on remove(); default this one. */
  selfPid?: number;
}

export type Layout = { version: 'v2'; mount: string } | { version: 'v1'; mounts: Record<Controller, string> & { cpuacct?: string } };

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}

/** v2 where a unified hierarchy (pure at <root>, or hybrid at <root>/unified) has our controllers. */
export async function detectLayout(root: string): Promise<Layout> {
  for (const mount of [root, path.join(root, 'unified')]) {
    const controllers = await readFile(path.join(mount, 'cgroup.controllers'), 'utf8').catch(() => undefined);
    if (controllers !== undefined) {
      const have = new Set(controllers.trim().split(/\s+/));
      if (CONTROLLERS.every((c) => have.has(c))) return { version: 'v2', mount };
    }
  }
  const mounts = {} as Record<Controller, string>;
  for (const c of CONTROLLERS) {
    const mount = path.join(root, c);
    if (!(await exists(path.join(mount, 'cgroup.procs'))))
      throw new Error(`no cgroup v2 with ${CONTROLLERS.join(',')} and no v1 ${c} hierarchy under ${root}`);
    mounts[c] = mount;
  }
  const cpuacct = path.join(root, 'cpuacct');
  return { version: 'v1', mounts: (await exists(path.join(cpuacct, 'cgroup.procs'))) ? { ...mounts, cpuacct } : mounts };
}

/**
 * The directory of cgroup <relPath> for one controller. In v1, cpuacct falls
 * back to the cpu hierarchy, where a co-mounted "cpu,cpuacct" keeps its files.
 */
export function cgroupDir(layout: Layout, controller: V1Controller, relPath: string): string {
  if (layout.version === 'v2') return path.join(layout.mount, relPath);
  return path.join(controller === 'cpuacct' ? (layout.mounts.cpuacct ?? layout.mounts.cpu) : layout.mounts[controller], relPath);
}

/** The cgroup paths of a process per v1 controller, and its v2 path under key "". */
async function cgroupsOf(pid: number): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const line of (await readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    for (const c of m[1]!.split(',')) out.set(c, m[2]!);
  }
  return out;
}

export class Cgroup {
  private limits: CgroupLimits | undefined;

  private constructor(
    private readonly layout: Layout,
    /** "<parent>/<uid>". */
    readonly relPath: string,
    private readonly selfPid: number,
    private readonly origin: Map<string, string>,
  ) {}

  /** Creates (or adopts an empty leftover) cgroup. Fails when it already holds processes. */
  static async create(opts: CgroupOptions): Promise<Cgroup> {
    const root = opts.root ?? DEFAULT_CGROUP_ROOT;
    const selfPid = opts.selfPid ?? process.pid;
    const layout = await detectLayout(root);
    const relPath = path.join(opts.parent, opts.uid);
    const origin = await cgroupsOf(selfPid);
    const cg = new Cgroup(layout, relPath, selfPid, origin);
    if (layout.version === 'v2') {
      // Controllers must be enabled on every ancestor for the leaf to have them.
      let dir = layout.mount;
      for (const part of opts.parent.split('/').filter(Boolean)) {
        await writeFile(path.join(dir, 'cgroup.subtree_control'), CONTROLLERS.map((c) => `+${c}`).join(' '));
        dir = path.join(dir, part);
        await mkdir(dir, { recursive: true });
      }
      await writeFile(path.join(dir, 'cgroup.subtree_control'), CONTROLLERS.map((c) => `+${c}`).join(' '));
    }
    for (const dir of cg.dirs()) await mkdir(dir, { recursive: true });
    const procs = await cg.pids();
    if (procs.length > 0)
      throw new Error(`cgroup ${cg.describe()} already holds processes ${procs.join(',')}: is another launcher running for ${opts.uid}?`);
    return cg;
  }

  /**
   * Removes the cgroup of a launcher that died without cleaning up (kill -9).
   * Refuses while it holds processes; a no-op when it does not exist.
   */
  static async removeLeftover(opts: CgroupOptions): Promise<void> {
    const layout = await detectLayout(opts.root ?? DEFAULT_CGROUP_ROOT);
    const cg = new Cgroup(layout, path.join(opts.parent, opts.uid), 0, new Map());
    const procs = await cg.pids();
    if (procs.length > 0) throw new Error(`cgroup ${cg.describe()} still holds processes ${procs.join(',')}`);
    for (const dir of cg.dirs()) {
      await rmdir(dir).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
  }

  describe(): string {
    return `${this.layout.version}:/${this.relPath}`;
  }

  get memoryLimitBytes(): number {
    return this.limits?.memoryBytes ?? 0;
  }

  private dirs(): string[] {
    if (this.layout.version === 'v2') return [path.join(this.layout.mount, this.relPath)];
    return (Object.keys(this.layout.mounts) as V1Controller[]).map((c) => this.dirOf(c));
  }

  private dirOf(c: V1Controller): string {
    return cgroupDir(this.layout, c, this.relPath);
  }

  /** Moves a process (and so its future children) into the cgroup. */
  async enter(pid: number): Promise<void> {
    for (const dir of this.dirs()) await writeFile(path.join(dir, 'cgroup.procs'), String(pid));
  }

  /** Processes in the cgroup (union over controllers for v1). */
  async pids(): Promise<number[]> {
    const all = new Set<number>();
    for (const dir of this.dirs()) {
      const text = await readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
      for (const p of text.split('\n').filter(Boolean)) all.add(Number(p));
    }
    return [...all].sort((a, b) => a - b);
  }

  async setLimits(limits: CgroupLimits): Promise<void> {
    const quotaUs =
      limits.cpuMillicores === undefined ? undefined : Math.max(1000, Math.round((limits.cpuMillicores * CPU_PERIOD_US) / 1000));
    if (this.layout.version === 'v2') {
      const dir = this.dirOf('memory');
      await writeFile(path.join(dir, 'memory.max'), String(limits.memoryBytes));
      await writeFile(path.join(dir, 'cpu.max'), `${quotaUs ?? 'max'} ${CPU_PERIOD_US}`);
      await writeFile(path.join(dir, 'pids.max'), String(limits.pidsMax));
    } else {
      await writeFile(path.join(this.dirOf('memory'), 'memory.limit_in_bytes'), String(limits.memoryBytes));
      await writeFile(path.join(this.dirOf('cpu'), 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
      await writeFile(path.join(this.dirOf('cpu'), 'cpu.cfs_quota_us'), String(quotaUs ?? -1));
      await writeFile(path.join(this.dirOf('pids'), 'pids.max'), String(limits.pidsMax));
    }
    await this.setCpuWeight(limits.cpuWeight);
    this.limits = limits;
  }

  async setCpuWeight(weight: CpuWeight): Promise<void> {
    if (this.layout.version === 'v2') {
      const value = weight === 'default' ? 100 : cpuSharesToWeight(weight.shares);
      await writeFile(path.join(this.dirOf('cpu'), 'cpu.weight'), String(value));
    } else {
      await writeFile(path.join(this.dirOf('cpu'), 'cpu.shares'), String(weight === 'default' ? 1024 : weight.shares));
    }
  }

  /**
   * Moves this process back to the cgroup it came from and removes the
   * cgroup. Call once everything else in it has exited.
   */
  async remove(timeoutMs = 5000): Promise<void> {
    if (this.layout.version === 'v2') {
      await writeFile(path.join(this.layout.mount, this.origin.get('') ?? '/', 'cgroup.procs'), String(this.selfPid));
    } else {
      for (const [c, mount] of Object.entries(this.layout.mounts)) {
        const from = this.origin.get(c) ?? '/';
        await writeFile(path.join(mount, from, 'cgroup.procs'), String(this.selfPid));
      }
    }
    const deadline = Date.now() + timeoutMs;
    for (const dir of this.dirs()) {
      // rmdir answers EBUSY for a moment after the last task left, while the
      // kernel finishes tearing it down; no event signals that in v1.
      for (let delayMs = 5; ; delayMs = Math.min(delayMs * 2, 200)) {
        try {
          await rmdir(dir);
          break;
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOENT') break;
          if (code !== 'EBUSY' || Date.now() > deadline) {
            throw new Error(`removing cgroup ${dir} (processes: ${(await this.pids()).join(',') || 'none'})`, { cause: err });
          }
        }
        await new Promise((r) => setTimeout(r, delayMs));
      }
    }
  }
}
