// Lease-based leader election for the cluster-wide VM/VMI controllers, as
// client-go's leaderelection does it: one coordination.k8s.io Lease; a
// candidate takes it only when the holder has not renewed it for a whole
// lease duration *as observed locally* (no trust in other hosts' clocks);
// the leader renews every retry period and steps down when it cannot renew
// within the renew deadline. Updates carry the resourceVersion read, so two
// candidates never both win.
import { V1MicroTime, type V1Lease } from '@kubernetes/client-node';
import { isConflict, isNotFound, isAlreadyExists } from '../kube/errors.js';
import type { Logger } from '../log.js';

export interface LeaseApi {
  readNamespacedLease(p: { name: string; namespace: string }): Promise<V1Lease>;
  createNamespacedLease(p: { namespace: string; body: V1Lease }): Promise<V1Lease>;
  replaceNamespacedLease(p: { name: string; namespace: string; body: V1Lease }): Promise<V1Lease>;
}

export interface LeaderElectionOptions {
  api: LeaseApi;
  name: string;
  namespace: string;
  identity: string;
  leaseDurationS: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  log: Logger;
  now?: () => number;
}

export class LeaderElector {
  private leading = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  /** The holder's record as last read, and when this process saw it change. */
  private observed: { holder: string; renewTime: string; atMs: number } | undefined;
  private lastRenewMs = 0;

  constructor(private readonly o: LeaderElectionOptions) {}

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    void this.tick();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.leading) {
      this.leading = false;
      this.o.onStoppedLeading();
    }
  }

  /** One attempt to acquire or renew; exported for tests. */
  async tryAcquireOrRenew(): Promise<boolean> {
    const now = this.o.now?.() ?? Date.now();
    const { api, name, namespace, identity, leaseDurationS } = this.o;
    const record = (base?: V1Lease): V1Lease => ({
      ...(base ?? {}),
      metadata: { ...(base?.metadata ?? {}), name, namespace },
      spec: {
        ...(base?.spec ?? {}),
        holderIdentity: identity,
        leaseDurationSeconds: leaseDurationS,
        renewTime: new V1MicroTime(now),
        // acquireTime marks a change of holder; a renewal keeps it.
        ...(base?.spec?.holderIdentity === identity && base.spec.acquireTime ? {} : { acquireTime: new V1MicroTime(now) }),
      },
    });
    let current: V1Lease;
    try {
      current = await api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        await api.createNamespacedLease({ namespace, body: record() });
        return true;
      } catch (e) {
        if (isAlreadyExists(e)) return false;
        throw e;
      }
    }
    const holder = current.spec?.holderIdentity ?? '';
    const renewTime = String(current.spec?.renewTime ?? '');
    if (!this.observed || this.observed.holder !== holder || this.observed.renewTime !== renewTime) {
      this.observed = { holder, renewTime, atMs: now };
    }
    const expired = this.observed.atMs + (current.spec?.leaseDurationSeconds ?? leaseDurationS) * 1000 < now;
    if (holder && holder !== identity && !expired) return false;
    try {
      await api.replaceNamespacedLease({ name, namespace, body: record(current) });
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const now = this.o.now?.() ?? Date.now();
    let ok = false;
    try {
      ok = await this.tryAcquireOrRenew();
    } catch (err) {
      this.o.log.warn({ err }, 'leader election: lease request failed');
    }
    if (this.stopped) return;
    if (ok) {
      this.lastRenewMs = now;
      if (!this.leading) {
        this.leading = true;
        this.o.log.info({ lease: `${this.o.namespace}/${this.o.name}`, identity: this.o.identity }, 'became leader');
        this.o.onStartedLeading();
      }
    } else if (this.leading && now - this.lastRenewMs > this.o.renewDeadlineMs) {
      this.leading = false;
      this.o.log.warn({ lease: `${this.o.namespace}/${this.o.name}` }, 'lost leadership: could not renew the lease in time');
      this.o.onStoppedLeading();
    }
    this.timer = setTimeout(() => void this.tick(), this.o.retryPeriodMs);
  }
}
