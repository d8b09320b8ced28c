// What the source agent asks its launcher for (StartMigration), from the
// migration state the controllers copied into the VMI: the relay's socket
// paths as the launcher's namespace sees them, the target's paths, and the
// settings fixed at the handoff (flags, or the MigrationPolicy that matched).
// Pure.
import type { IncomingPaths, StartMigration } from '../../launcher/agent-api.js';
import type { MigrationConfiguration } from '../kubevirt/types.js';
import { parseQuantity } from '../kube/quantity.js';

/** Where the source launcher's libvirtd and QEMU find the relay: /run/libvirt/m inside its namespace. */
export const SOURCE_SOCKETS = { libvirt: 'lv', memory: 'mem', disk: 'nbd' } as const;
const M = '/run/libvirt/m';
const MiB = 2 ** 20;
const GiB = 2 ** 30;

export function startRequest(o: {
  uid: string;
  targetPaths: IncomingPaths;
  configuration: MigrationConfiguration | undefined;
  /** Guest memory plus the bytes of the disks copied: what completionTimeoutPerGiB is per. */
  dataBytes: number;
}): StartMigration {
  const c = o.configuration ?? {};
  const bandwidth = parseQuantity(c.bandwidthPerMigration ?? '0') ?? 0;
  const perGiB = c.completionTimeoutPerGiB ?? 150;
  return {
    uid: o.uid,
    destUri: `qemu+unix:///system?socket=${M}/${SOURCE_SOCKETS.libvirt}`,
    memoryUri: `unix://${M}/${SOURCE_SOCKETS.memory}`,
    disksUri: `unix://${M}/${SOURCE_SOCKETS.disk}`,
    migrateDisks: [],
    targetPaths: o.targetPaths,
    // libvirt takes whole MiB/s; a limit under 1 MiB/s is 1, never unlimited.
    ...(bandwidth > 0 ? { bandwidthMiBps: Math.max(1, Math.round(bandwidth / MiB)) } : {}),
    ...(c.allowAutoConverge ? { autoConverge: true } : {}),
    maxDowntimeMs: 0,
    progressTimeoutS: c.progressTimeout ?? 150,
    completionTimeoutS: perGiB * Math.max(1, Math.ceil(o.dataBytes / GiB)),
    allowWorkloadDisruption: c.allowWorkloadDisruption ?? false,
  };
}
