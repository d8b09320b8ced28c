// `vkvm reset`: undoes `vkvm join`, as `kubeadm reset`. Stops the agent (unit
// or detached process), powers off every VM (ACPI, destroyed after the grace
// period) and removes its launcher, removes the pod network (VM namespaces,
// DHCP, rules, and the bridge if the agent made it), deletes the Node with
// the node's own credentials (bounded in time: node-deletion.ts), and removes
// certificates and state. Each step tolerates work already done, so a reset
// that failed half-way can simply be re-run.
import { NO_HOST_FILES } from '../../vmm/host-files.js';
import { DEFAULT_DOWNLOAD_POLICY } from '../../vmm/disks/download-policy.js';
import { existsSync } from 'node:fs';
import { readdir, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { loadKubeConfig, makeClients } from '../kube/client.js';
import { LauncherRegistry } from '../launchers/registry.js';
import { LAUNCHER_DEFAULTS } from '../../launcher/agent-api.js';
import { DEFAULT_BRIDGE, PodNetwork } from '../network/pod-network.js';
import { cleanupKubeProxy } from '../cluster-services/kube-proxy.js';
import type { Logger } from '../log.js';
import { JoinError } from './errors.js';
import { deleteOwnNode } from './node-deletion.js';
import { JOIN_RECORD, readJoinRecord } from './join.js';
import { mountsBelow } from '../host-mounts.js';
import { pluginRegistryDirOf } from '../csi-node/registry-dir.js';
import { takeDownCsiVolumes } from '../csi-node/take-down.js';
import { AGENT_LOG, PID_FILE, removeSystemdService, stopDetachedAgent, SYSTEMD_UNIT_PATH } from './service.js';

export interface ResetOptions {
  stateDir: string;
  /** Reset a state dir without join.json (e.g. one `vkvm up` or `vkvm node` used). */
  force: boolean;
  /** ACPI power-off time per VM before it is destroyed. */
  gracePeriodS: number;
  /** How long to wait on the API server to delete the Node (default NODE_DELETE_TIMEOUT_MS). */
  nodeDeleteTimeoutMs?: number;
  log: Logger;
}

export interface ResetResult {
  /** The state dir did not exist: nothing was done. */
  nothingToReset?: boolean;
  nodeName?: string;
  vmsStopped: number;
  nodeDeleted: boolean;
  /** Set when the Node could not be deleted: what the operator should do. */
  nodeWarning?: string;
}

/**
 * Everything join and the agent keep in the state dir, the pulled-image store included (as
 * `kubeadm reset` leaves no kubelet state); the join record last, so an interrupted reset can be re-run.
 */
const STATE_ENTRIES = ['vms', 'network', 'kube-proxy', 'pki', 'kubeconfig', 'images', PID_FILE, AGENT_LOG, JOIN_RECORD];
/** The CSI node side's (provider/csi-node/): publications, stagings and, with a state dir of its own, the plugin registry. */
const CSI_ENTRIES = ['pods', 'plugins', 'plugins_registry'];

/** Where a node keeps what its VMs and pod network need to be stopped and removed. */
export interface NodeWorkloads {
  stateDir: string;
  runDir: string;
  imageCacheDir: string;
  bridge: string;
  cgroupParent: string;
  /** The node, when its CSI volumes are to be taken down too (its drivers still running). */
  csi?: { nodeName: string };
}

async function stopVms(w: NodeWorkloads, gracePeriodS: number, log: Logger): Promise<number> {
  const registry = new LauncherRegistry(
    {
      vmsDir: join(w.stateDir, 'vms'),
      socketDir: join(w.runDir, 'launchers'),
      imageCacheDir: w.imageCacheDir,
      // Only stops launchers: starts none, so no libvirtd uses it.
      libvirtCacheDir: LAUNCHER_DEFAULTS.libvirtCacheDir,
      hostFiles: NO_HOST_FILES,
      downloads: DEFAULT_DOWNLOAD_POLICY,
      allowSoftwareEmulation: true,
      logLevel: 'warn',
      cgroupParent: w.cgroupParent,
    },
    log.child({ component: 'launchers' }),
  );
  const uids = await registry.discover();
  await Promise.all(uids.map((uid) => registry.stop(uid, gracePeriodS)));
  for (const uid of uids) await registry.remove(uid);
  registry.close();
  return uids.length;
}

/**
 * With the agent stopped: powers off every VM of the node (ACPI, destroyed
 * after the grace period), removes their launchers, takes down their CSI
 * volumes (with `w.csi`), and removes the pod
 * network (VM namespaces, DHCP, rules, routes, the bridge if the agent made
 * it) and kube-proxy's rules. Returns how many VMs were stopped. Idempotent.
 */
export async function stopNodeWorkloads(w: NodeWorkloads, gracePeriodS: number, log: Logger): Promise<number> {
  const vmsStopped = await stopVms(w, gracePeriodS, log);
  if (vmsStopped) log.info({ vms: vmsStopped }, 'stopped the VMs of this node');
  const kubeconfig = join(w.stateDir, 'kubeconfig');
  if (w.csi && existsSync(kubeconfig)) {
    await takeDownCsiVolumes({
      stateDir: w.stateDir,
      pluginRegistryDir: pluginRegistryDirOf(w.stateDir),
      nodeName: w.csi.nodeName,
      clients: makeClients(loadKubeConfig(kubeconfig)),
      log,
    });
  }
  const network = new PodNetwork({ bridge: w.bridge, dir: join(w.stateDir, 'network'), podCidr: async () => undefined, log });
  await network.retainOnly(() => false);
  await network.node.remove();
  await cleanupKubeProxy(join(w.stateDir, 'kube-proxy'), log);
  return vmsStopped;
}

export async function resetNode(o: ResetOptions): Promise<ResetResult> {
  const { log } = o;
  const record = await readJoinRecord(o.stateDir);
  if (!record && !o.force) {
    if (!existsSync(o.stateDir)) return { nothingToReset: true, vmsStopped: 0, nodeDeleted: false };
    throw new JoinError(`${o.stateDir} holds no vkvm join (no ${JOIN_RECORD}); pass --force to stop its VMs and remove its state anyway`);
  }
  if (record?.service === 'systemd' || existsSync(SYSTEMD_UNIT_PATH)) await removeSystemdService(log);
  await stopDetachedAgent(o.stateDir, log);

  const runDir = record?.runDir ?? '/run/vkvm';
  const vmsStopped = await stopNodeWorkloads(
    {
      stateDir: o.stateDir,
      runDir,
      imageCacheDir: record?.imageCacheDir ?? '/var/cache/vkvm/images',
      bridge: record?.bridge ?? DEFAULT_BRIDGE,
      cgroupParent: record?.cgroupParent ?? LAUNCHER_DEFAULTS.cgroupParent,
      ...(record ? { csi: { nodeName: record.nodeName } } : {}),
    },
    o.gracePeriodS,
    log,
  );

  const result: ResetResult = { vmsStopped, nodeDeleted: false, ...(record ? { nodeName: record.nodeName } : {}) };
  if (record) {
    const deletion = await deleteOwnNode(
      makeClients(loadKubeConfig(join(o.stateDir, 'kubeconfig'))),
      record.nodeName,
      o.nodeDeleteTimeoutMs,
    );
    result.nodeDeleted = deletion.deleted;
    if (!deletion.deleted) result.nodeWarning = deletion.warning;
  }

  for (const entry of STATE_ENTRIES) await rm(join(o.stateDir, entry), { recursive: true, force: true });
  // The CSI node side's directories go only with nothing mounted below them: a volume still published there
  // is the driver's to take down, and a recursive removal would go into its data.
  const csiDirs = CSI_ENTRIES.map((e) => join(o.stateDir, e));
  const mounted = await mountsBelow(csiDirs);
  if (mounted.length === 0) for (const dir of csiDirs) await rm(dir, { recursive: true, force: true });
  else log.warn({ mounted }, 'CSI volumes are still published or staged here: their directories are kept');
  await rm(join(runDir, 'launchers'), { recursive: true, force: true });
  // The state dir goes too unless something else (e.g. `vkvm up`'s cluster/) lives there.
  if ((await readdir(o.stateDir).catch(() => ['?'])).length === 0) await rmdir(o.stateDir);
  return result;
}
