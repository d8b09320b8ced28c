// Caps on the streaming sessions (exec, attach, log follow, port-forward, VNC, a VMI's console) open at once: on
// the node, and per user. A session holds its slot from before its upgrade
// (or response) until its connection closes, whichever way the session ends:
// the caps bound the connections held, not only the sessions being served.
import type { Counter, Gauge } from 'prom-client';

export interface SessionLimits {
  /** Sessions open at once on the node. */
  perNode: number;
  /** Sessions open at once per user (username and uid). */
  perUser: number;
}

/**
 * The kubelet has no such caps. kube-apiserver proxies every kubectl session
 * under its own client identity, so the per-user cap is also the cap on all
 * proxied sessions: 128 covers a `kubectl logs -f` on each of 110 pods (the
 * default --max-pods) with room for interactive sessions; the node cap
 * leaves as much again to clients that call the kubelet API directly.
 */
export const DEFAULT_SESSION_LIMITS: SessionLimits = { perNode: 256, perUser: 128 };

/** What tells users apart here: the authenticated username and uid (auth's UserInfo has both). */
export interface SessionUser {
  username: string;
  uid?: string;
}

export type StreamingEndpoint = 'exec' | 'attach' | 'log' | 'portForward' | 'vnc' | 'vmi-console';
export type SessionLimitName = 'node' | 'user';

/** A session refused because a cap is reached; the kubelet API answers 429. */
export class SessionLimitError extends Error {
  readonly kind = 'SessionLimit';
  constructor(
    readonly limit: SessionLimitName,
    message: string,
  ) {
    super(message);
  }
}

export interface SessionSlot {
  /** Gives the slot back; calls after the first do nothing. */
  release(): void;
}

export interface SessionMetrics {
  /** Open sessions by endpoint. */
  streamingSessions: Gauge<'endpoint'>;
  /** Refusals by the cap reached and endpoint. */
  streamingSessionsRefused: Counter<'limit' | 'endpoint'>;
}

/** Users are told apart by username and uid: a reused name with a new uid is someone else. */
const userKey = (user: SessionUser): string => JSON.stringify([user.username, user.uid ?? '']);

export class SessionLimiter {
  private open = 0;
  private readonly openByUser = new Map<string, number>();

  constructor(
    private readonly limits: SessionLimits,
    private readonly nodeName: string,
    private readonly metrics: SessionMetrics,
  ) {}

  /** A slot for one session of `user`; throws SessionLimitError when either cap is reached. */
  acquire(user: SessionUser, endpoint: StreamingEndpoint): SessionSlot {
    const key = userKey(user);
    const ofUser = this.openByUser.get(key) ?? 0;
    // The user's own cap first: it is the one the user can do something about.
    if (ofUser >= this.limits.perUser) {
      throw this.refuse(
        'user',
        endpoint,
        `too many streaming sessions for user "${user.username}" on node ${this.nodeName} (limit ${this.limits.perUser}, --max-streaming-sessions-per-user): close one and retry`,
      );
    }
    if (this.open >= this.limits.perNode) {
      throw this.refuse(
        'node',
        endpoint,
        `too many streaming sessions on node ${this.nodeName} (limit ${this.limits.perNode}, --max-streaming-sessions): retry once one has ended`,
      );
    }
    this.open++;
    this.openByUser.set(key, ofUser + 1);
    this.metrics.streamingSessions.inc({ endpoint });
    let held = true;
    return {
      release: () => {
        if (!held) return;
        held = false;
        this.open--;
        const left = (this.openByUser.get(key) ?? 1) - 1;
        if (left === 0) this.openByUser.delete(key);
        else this.openByUser.set(key, left);
        this.metrics.streamingSessions.dec({ endpoint });
      },
    };
  }

  private refuse(limit: SessionLimitName, endpoint: StreamingEndpoint, message: string): SessionLimitError {
    this.metrics.streamingSessionsRefused.inc({ limit, endpoint });
    return new SessionLimitError(limit, message);
  }
}

/** Releases `slot` when `connection` closes, or now if it has closed already. */
export function releaseOnClose(
  slot: SessionSlot,
  connection: { readonly closed: boolean; once(event: 'close', listener: () => void): unknown },
): void {
  if (connection.closed) slot.release();
  else connection.once('close', () => slot.release());
}
