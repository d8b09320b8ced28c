// Keeps the Node's status in step with the host: re-reads host facts every
// statusCheckIntervalS, and patches status when something vkvm owns changed
// (or statusReportIntervalS passed). Strategic merge by condition type leaves
// conditions and fields of other components alone.
import type { V1Node, V1NodeStatus } from '@kubernetes/client-node';
import type { AgentConfig } from '../config.js';
import { strategicMerge, type KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import type { HostFacts } from './host-facts.js';
import { deriveLabels, deriveNodeStatus, statusChanged } from './status.js';

export interface NodeControllerDeps {
  clients: KubeClients;
  config: AgentConfig;
  readFacts: () => Promise<HostFacts>;
  now?: () => Date;
  log: Logger;
}

/** The part of a live Node's status that vkvm derives, for comparison. */
function ownedView(node: V1Node, ownTypes: Set<string>): V1NodeStatus {
  const s = node.status ?? {};
  return {
    capacity: s.capacity,
    allocatable: s.allocatable,
    conditions: (s.conditions ?? []).filter((c) => ownTypes.has(c.type)),
    addresses: s.addresses,
    daemonEndpoints: s.daemonEndpoints,
    // The API server leaves an empty list out.
    images: s.images ?? [],
    nodeInfo: s.nodeInfo,
  } as V1NodeStatus;
}

export class NodeController {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private lastReport = 0;
  lastFacts: HostFacts | undefined;

  constructor(private readonly deps: NodeControllerDeps) {}

  start(): void {
    const tick = async () => {
      try {
        await this.sync();
      } catch (err) {
        this.deps.log.warn({ err }, 'node status sync failed; retrying at the next interval');
      }
      if (!this.stopped) this.timer = setTimeout(tick, this.deps.config.statusCheckIntervalS * 1000);
    };
    this.timer = setTimeout(tick, this.deps.config.statusCheckIntervalS * 1000);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** One reconcile pass; safe to call at any time. */
  async sync(): Promise<void> {
    const { clients, config, log } = this.deps;
    const now = (this.deps.now ?? (() => new Date()))();
    const facts = await this.deps.readFacts();
    this.lastFacts = facts;
    const node = await clients.core.readNode({ name: config.nodeName });
    const current = node.status?.conditions ?? [];
    const desired = deriveNodeStatus(config, facts, current, now);
    const ownTypes = new Set((desired.conditions ?? []).map((c) => c.type));
    const due = now.getTime() - this.lastReport >= config.statusReportIntervalS * 1000;
    const labels = deriveLabels(config, facts);
    const labelsDiffer = Object.entries(labels).some(([k, v]) => node.metadata?.labels?.[k] !== v);
    if (labelsDiffer) {
      await clients.core.patchNode({ name: config.nodeName, body: { metadata: { labels } } }, strategicMerge);
      log.info({ labels }, 'node labels updated');
    }
    if (!due && !statusChanged(ownedView(node, ownTypes), desired)) return;
    await clients.core.patchNodeStatus({ name: config.nodeName, body: { status: desired } }, strategicMerge);
    this.lastReport = now.getTime();
    const ready = desired.conditions?.find((c) => c.type === 'Ready');
    log.debug({ ready: ready?.status }, 'node status reported');
  }
}
