// What vkvm up hands a simulated host's init (simulated-host.ts), and the
// log line by which the init says it joined.
import type { NodeStorageSpec } from '../node-storage/node-storage-spec.js';
import type { CgroupMounts } from './cgroup-mounts.js';

/** The log message vkvm up waits for. */
export const JOINED_MESSAGE = 'joined the cluster';
/** Logged by a simulated host once a SIGHUP's agent restart is done. */
export const AGENT_RESTARTED_MESSAGE = 'restarted the node agent';

export interface SimulatedHostSpec {
  name: string;
  rootDir: string;
  stateDir: string;
  runDir: string;
  imageCacheDir: string;
  libvirtCacheDir: string;
  /** Paths of this machine the host must not see (node 1's directories, holding every other node's). */
  hidden: string[];
  /** Paths inside hidden ones mounted back read-only. */
  shared: string[];
  /** `vkvm join` arguments as `vkvm token create` printed them, without "vkvm join". */
  joinArgs: string[];
  /** Node agent flags, passed through `vkvm join` to the agent. */
  agentArgs: string[];
  cgroupParent: string;
  /** This machine's cgroup hierarchies, which the namespace's fresh /sys hides. */
  cgroups: CgroupMounts;
  gracePeriodS: number;
  logLevel: string;
  /** Its CSI driver and provisioner, run once joined (provider/node-storage/). */
  storage?: NodeStorageSpec;
}
