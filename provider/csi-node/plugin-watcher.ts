// The kubelet's plugin manager for CSI drivers: the node's plugin registry
// directory holds one registration socket per driver (pluginregistration v1,
// as node-driver-registrar or `vkvm csi --registration-socket` serves it).
// Level-triggered: the directory is rescanned on every change it reports and
// periodically. A new socket is asked GetInfo, its driver NodeGetInfo, and
// once both answer the driver is registered and told so; a socket that is
// gone unregisters its driver. After each scan the Node is labelled with the
// drivers' topology and its CSINode made to list exactly the registered
// drivers (csinode.ts), unless the watcher serves a take-down, which must not
// wait on the API server. A driver whose socket is there but which does not
// answer is retried on the next scan.
import { watch, type FSWatcher } from 'node:fs';
import { mkdir, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { V1CSINode, V1CSINodeDriver } from '@kubernetes/client-node';
import { mergePatch, type KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { loadRegistrationService } from '../csi/proto.js';
import { csiNodeDiffers, csiNodeDriver, desiredCsiNode } from './csinode.js';
import { driverClient, type DriverClient, type NodeInfo } from './driver-client.js';

const RESCAN_MS = 10_000;
const REGISTRATION_TIMEOUT_MS = 10_000;

export interface RegisteredDriver {
  name: string;
  endpoint: string;
  /** The registration socket it came from. */
  socket: string;
  entry: V1CSINodeDriver;
  /** Its NodeGetInfo topology, which the Node carries as labels (what a provisioner's topology reads). */
  topology: Record<string, string>;
  client: DriverClient;
}

/** The labels to add to the Node for the drivers' topology: those it lacks or holds another value of. Pure. */
export function missingTopologyLabels(
  nodeLabels: Readonly<Record<string, string>>,
  drivers: ReadonlyArray<{ topology: Record<string, string> }>,
): Record<string, string> {
  const wanted = Object.assign({}, ...drivers.map((d) => d.topology)) as Record<string, string>;
  return Object.fromEntries(Object.entries(wanted).filter(([k, v]) => nodeLabels[k] !== v));
}

/** Which sockets to register and which registrations to drop, given the sockets in the directory now. Pure. */
export function registrationChanges(
  sockets: readonly string[],
  registered: ReadonlyMap<string, unknown>,
): { register: string[]; unregister: string[] } {
  const present = new Set(sockets);
  return {
    register: sockets.filter((s) => !registered.has(s)),
    unregister: [...registered.keys()].filter((s) => !present.has(s)),
  };
}

/** Whether the plugin speaks a CSI version the node does (1.x, as the kubelet accepts). */
export function supportsCsiV1(versions: readonly string[]): boolean {
  return versions.some((v) => /^v?1(\.\d+){0,2}$/.test(v));
}

interface PluginInfo {
  type?: string;
  name?: string;
  endpoint?: string;
  supportedVersions?: string[];
}
type Unary = (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: Error | null, res: object) => void) => void;

export class PluginWatcher {
  /** By registration socket. */
  private readonly bySocket = new Map<string, RegisteredDriver>();
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private scanning: Promise<void> | undefined;
  private again = false;
  private stopped = false;

  constructor(
    private readonly o: {
      dir: string;
      /**
       * The Node whose labels and CSINode each scan makes match the registered
       * drivers. Absent at a take-down (`vkvm reset`, a host's stop): it only
       * needs the drivers, and its API server may be gone, which would stall a
       * scan on TCP timeouts.
       */
      csiNode?: { nodeName: string; clients: KubeClients };
      log: Logger;
      /** Called after a scan registered or unregistered a driver (pods waiting for one sync again). */
      onChange?: () => void;
    },
  ) {}

  /** The registered driver of this name. */
  driver(name: string): RegisteredDriver | undefined {
    return [...this.bySocket.values()].find((d) => d.name === name);
  }

  async start(): Promise<void> {
    await mkdir(this.o.dir, { recursive: true, mode: 0o700 });
    this.watcher = watch(this.o.dir, () => this.kick());
    this.watcher.on('error', (err) => this.o.log.warn({ err }, 'plugin registry watch failed; rescanning periodically'));
    this.timer = setInterval(() => this.kick(), RESCAN_MS);
    this.timer.unref();
    this.kick();
    await this.scanning;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.watcher?.close();
    clearInterval(this.timer);
    await this.scanning;
    for (const d of this.bySocket.values()) d.client.close();
  }

  /** Scans now, or once more after the scan under way. */
  private kick(): void {
    if (this.stopped) return;
    if (this.scanning) {
      this.again = true;
      return;
    }
    this.scanning = this.scan()
      .catch((err: unknown) => this.o.log.warn({ err }, 'plugin registry scan failed; will retry'))
      .finally(() => {
        this.scanning = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  private async scan(): Promise<void> {
    const { register, unregister } = registrationChanges(await this.sockets(), this.bySocket);
    for (const socket of unregister) {
      const d = this.bySocket.get(socket)!;
      this.bySocket.delete(socket);
      d.client.close();
      this.o.log.info({ driver: d.name, socket }, 'CSI driver unregistered: its registration socket is gone');
    }
    const added = (await Promise.all(register.map((s) => this.register(s)))).filter((ok) => ok).length;
    if (this.o.csiNode) await this.syncCsiNode(this.o.csiNode);
    if (added || unregister.length) this.o.onChange?.();
  }

  private async sockets(): Promise<string[]> {
    const names = await readdir(this.o.dir).catch(() => [] as string[]);
    const found = await Promise.all(
      names
        .filter((n) => !n.startsWith('.'))
        .map(async (n) => {
          const p = join(this.o.dir, n);
          return (await stat(p).catch(() => undefined))?.isSocket() ? p : undefined;
        }),
    );
    return found.filter((p): p is string => p !== undefined);
  }

  /** GetInfo, then NodeGetInfo of the driver it names, then NotifyRegistrationStatus; false when it did not register. */
  private async register(socket: string): Promise<boolean> {
    const Registration = loadRegistrationService();
    const reg = new Registration(`unix://${socket}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<string, Unary>;
    const call = (method: string, req: object) =>
      new Promise<object>((resolve, reject) =>
        reg[method]!.call(reg, req, new grpc.Metadata(), { deadline: Date.now() + REGISTRATION_TIMEOUT_MS }, (err, res) =>
          err ? reject(err) : resolve(res),
        ),
      );
    let client: DriverClient | undefined;
    try {
      const info = (await call('GetInfo', {})) as PluginInfo;
      if (info.type !== 'CSIPlugin') return false; // a device plugin's socket: not ours to handle
      const refusal = !info.name
        ? 'no plugin name'
        : !info.endpoint
          ? 'no endpoint'
          : !supportsCsiV1(info.supportedVersions ?? [])
            ? `no CSI version the node speaks (1.x) in ${JSON.stringify(info.supportedVersions ?? [])}`
            : this.driver(info.name)
              ? `driver ${info.name} is registered already from another socket`
              : undefined;
      if (refusal) {
        await call('NotifyRegistrationStatus', { pluginRegistered: false, error: refusal }).catch(() => undefined);
        this.o.log.warn({ socket, refusal }, 'CSI plugin registration refused');
        return false;
      }
      client = driverClient(info.endpoint!);
      const nodeInfo = (await client.node('NodeGetInfo', {})) as unknown as NodeInfo;
      if (!nodeInfo.nodeId) throw new Error(`driver ${info.name} answered NodeGetInfo without a node_id`);
      const d: RegisteredDriver = {
        name: info.name!,
        endpoint: info.endpoint!,
        socket,
        entry: csiNodeDriver(info.name!, nodeInfo),
        topology: nodeInfo.accessibleTopology?.segments ?? {},
        client,
      };
      this.bySocket.set(socket, d);
      client = undefined;
      await call('NotifyRegistrationStatus', { pluginRegistered: true }).catch((err: unknown) =>
        this.o.log.warn({ err, socket }, 'could not tell the plugin it is registered'),
      );
      this.o.log.info({ driver: d.name, endpoint: d.endpoint, nodeId: nodeInfo.nodeId }, 'CSI driver registered');
      return true;
    } catch (err) {
      this.o.log.warn({ err, socket }, 'CSI plugin did not register; will retry');
      return false;
    } finally {
      client?.close();
      reg.close();
    }
  }

  /** Labels the Node with the drivers' topology (as the kubelet does; never removed), then makes its CSINode list exactly the registered drivers. */
  private async syncCsiNode(to: { nodeName: string; clients: KubeClients }): Promise<void> {
    const { storage, core } = to.clients;
    const name = to.nodeName;
    const node = await core.readNode({ name });
    const labels = missingTopologyLabels(node.metadata?.labels ?? {}, [...this.bySocket.values()]);
    if (Object.keys(labels).length) {
      await core.patchNode({ name, body: { metadata: { labels } } }, mergePatch);
      this.o.log.info({ labels }, "labelled the Node with its CSI drivers' topology");
    }
    const desired = desiredCsiNode(
      { name, uid: node.metadata!.uid! },
      [...this.bySocket.values()].map((d) => d.entry),
    );
    let found: V1CSINode | undefined;
    try {
      found = await storage.readCSINode({ name });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (!csiNodeDiffers(found, desired)) return;
    if (!found) await storage.createCSINode({ body: desired });
    // Whole, at the version read: a conflict is retried by the next scan.
    else await storage.replaceCSINode({ name, body: { ...desired, metadata: { ...found.metadata, ...desired.metadata } } });
    this.o.log.info({ drivers: desired.spec.drivers.map((d) => d.name) }, 'CSINode updated');
  }
}
