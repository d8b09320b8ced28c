// The node heartbeat: a coordination.k8s.io/v1 Lease in kube-node-lease, owned
// by the Node so it is garbage-collected with it. Renewed only while the host
// self-check passes, so a sick agent lets the node go NotReady instead of lying.
// A renewal gets one renew interval, as the kubelet's heartbeat client does;
// one that fails or hangs closes every connection to the API server (the
// kubelet's closeAllConns), so requests stuck on a half-open keep-alive
// connection fail and the next ones connect anew.
import { V1MicroTime, type V1Lease } from '@kubernetes/client-node';
import { withDeadline } from '../../launcher/agent-api.js';
import type { KubeClients } from '../kube/client.js';
import { apiStatusCode, isConflict, isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';

export const LEASE_NAMESPACE = 'kube-node-lease';

export interface LeaseOptions {
  nodeName: string;
  nodeUID: string;
  leaseDurationS: number;
  renewIntervalMs: number;
  /** Host self-check; the lease is not renewed while it fails. */
  healthy: () => Promise<boolean>;
}

export class LeaseController {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Last successful renewal, for the agent's own health endpoint. */
  lastRenewal: Date | undefined;

  constructor(
    private readonly clients: KubeClients,
    private readonly opts: LeaseOptions,
    private readonly log: Logger,
  ) {}

  start(): void {
    const tick = async () => {
      try {
        if (await this.opts.healthy()) await withDeadline(this.renew(), this.opts.renewIntervalMs, 'lease renewal');
        else this.log.warn('host self-check failed; not renewing the node lease');
      } catch (err) {
        // No answer at all (a timeout, a reset): the connection may be half-open.
        if (apiStatusCode(err) === undefined) this.clients.closeConnections();
        this.log.warn({ err }, 'lease renewal failed; retrying at the next interval');
      }
      if (!this.stopped) this.timer = setTimeout(tick, this.opts.renewIntervalMs);
    };
    void tick();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private desired(existing?: V1Lease): V1Lease {
    const { nodeName, nodeUID, leaseDurationS } = this.opts;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        ...existing?.metadata,
        name: nodeName,
        namespace: LEASE_NAMESPACE,
        ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: nodeName, uid: nodeUID }],
      },
      spec: { ...existing?.spec, holderIdentity: nodeName, leaseDurationSeconds: leaseDurationS, renewTime: new V1MicroTime() },
    };
  }

  /** Create or renew; on conflict re-read once and try again. */
  async renew(): Promise<V1Lease> {
    for (let attempt = 0; ; attempt++) {
      let existing: V1Lease | undefined;
      try {
        existing = await this.clients.coordination.readNamespacedLease({ name: this.opts.nodeName, namespace: LEASE_NAMESPACE });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      try {
        const lease = existing
          ? await this.clients.coordination.replaceNamespacedLease({
              name: this.opts.nodeName,
              namespace: LEASE_NAMESPACE,
              body: this.desired(existing),
            })
          : await this.clients.coordination.createNamespacedLease({ namespace: LEASE_NAMESPACE, body: this.desired() });
        this.lastRenewal = new Date();
        this.log.debug({ renewTime: lease.spec?.renewTime }, 'lease renewed');
        return lease;
      } catch (err) {
        if (attempt < 2 && isConflict(err)) continue;
        throw err;
      }
    }
  }
}
