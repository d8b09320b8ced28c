// Where the host's CPU went between two moments of a pod benchmark, by part:
// QEMU, each kind of process under the VMs' launchers, the node agent and the
// host commands it ran, the control plane, and the rest of the host. Taken
// as snapshots of running totals (/proc/stat, /proc/<pid>/stat); a part's
// use in a window is the difference of two snapshots.
import { readNodeUsage } from '../../provider/node/usage.js';
import { processCpu } from '../../provider/proc-cpu.js';
import type { BenchNode } from './cluster-node.js';
import { launcherPidsOf, processTree } from './proc.js';

/** CPU seconds used so far, by part. */
export interface CpuSnapshot {
  atMs: number;
  hostBusyS: number;
  /** The VMs' QEMUs: guest vCPUs under TCG, and QEMU itself. */
  qemuS: number;
  /** The launchers' own Node processes. */
  launcherNodeS: number;
  /** Their private libvirtds. */
  libvirtdS: number;
  /** The long-lived `virsh event` of each launcher. */
  virshS: number;
  /** The namespace helpers (unshare, the namespace's sh), and every short-lived process a launcher's tree reaped (virsh start, mount, taskset, QEMU probes). */
  helpersS: number;
  /** The node agent's own process. */
  agentS: number;
  /** The host commands the agent ran and reaped (ip, nft, dnsmasq, dhcp_release, …). */
  agentChildrenS: number;
  controlPlaneS: number;
}

export type CpuPart = Exclude<keyof CpuSnapshot, 'atMs' | 'hostBusyS'>;

/** vkvm's own parts: everything of it but QEMU. */
export const VKVM_PARTS: readonly CpuPart[] = ['launcherNodeS', 'libvirtdS', 'virshS', 'helpersS', 'agentS', 'agentChildrenS'];
export const LAUNCHER_PARTS: readonly CpuPart[] = ['launcherNodeS', 'libvirtdS', 'virshS', 'helpersS'];

/** A snapshot over the launchers of the VMs `uids` (pod UIDs); launchers of other VMs are not counted. */
export async function cpuSnapshot(node: BenchNode, uids: readonly string[]): Promise<CpuSnapshot> {
  const atMs = Date.now();
  const usage = await readNodeUsage();
  const s: CpuSnapshot = {
    atMs,
    hostBusyS: usage.cpuUsageCoreNanoSeconds / 1e9,
    qemuS: 0,
    launcherNodeS: 0,
    libvirtdS: 0,
    virshS: 0,
    helpersS: 0,
    agentS: 0,
    agentChildrenS: 0,
    controlPlaneS: 0,
  };
  for (const uid of uids) {
    for (const launcher of launcherPidsOf(uid)) {
      for (const p of await processTree(launcher)) {
        const cpu = await processCpu(p.pid);
        if (!cpu) continue;
        const self = cpu.selfMs / 1000;
        if (p.comm.startsWith('qemu-system')) s.qemuS += self;
        else if (p.pid === launcher) s.launcherNodeS += self;
        else if (p.comm === 'libvirtd') s.libvirtdS += self;
        else if (p.comm === 'virsh') s.virshS += self;
        else s.helpersS += self;
        if (!p.comm.startsWith('qemu-system')) s.helpersS += cpu.reapedChildrenMs / 1000;
      }
    }
  }
  const agent = await processCpu(node.agentPid);
  s.agentS = (agent?.selfMs ?? 0) / 1000;
  s.agentChildrenS = (agent?.reapedChildrenMs ?? 0) / 1000;
  for (const p of await processTree(node.cluster.pid)) s.controlPlaneS += ((await processCpu(p.pid))?.selfMs ?? 0) / 1000;
  return s;
}

/** CPU seconds each part used from `before` to `after` (a part's processes that exited between are lost to it, and show as the rest of the host). */
export function cpuUsed(before: CpuSnapshot, after: CpuSnapshot): Record<CpuPart | 'hostBusyS', number> & { windowS: number } {
  const parts = Object.keys(after).filter((k) => k !== 'atMs') as Array<CpuPart | 'hostBusyS'>;
  return {
    windowS: (after.atMs - before.atMs) / 1000,
    ...(Object.fromEntries(parts.map((k) => [k, after[k] - before[k]])) as Record<CpuPart | 'hostBusyS', number>),
  };
}
