// A migration's control stream as both agents use it: newline-delimited JSON
// messages (frames.ts) each way, and a heartbeat. TCP keepalive notices a
// lost peer only while the stream is idle, and a migration's streams are busy;
// so each side sends `ping` every HEARTBEAT_MS, and a peer silent for
// HEARTBEAT_LOST_MS is taken as gone: the channel closes, and its owner closes
// the migration's data streams with it, so libvirt and QEMU fail at once
// rather than after TCP's retransmission timeout.
import type { Duplex } from 'node:stream';
import { encodeControl, MAX_CONTROL_LINE_BYTES, parseControl, type ControlMessage } from './frames.js';
import { readLine } from './line-reader.js';

export const HEARTBEAT_MS = 2_000;
export const HEARTBEAT_LOST_MS = 10_000;

export class ControlChannel {
  private readonly waiters = new Set<{ type: ControlMessage['type']; resolve(m: ControlMessage): void; reject(e: Error): void }>();
  private lastHeardMs = Date.now();
  private readonly timer: NodeJS.Timeout;
  private closedWith: Error | undefined;

  constructor(
    private readonly socket: Duplex,
    private readonly o: {
      /** Each message but `ping`, in order. */
      onMessage?(m: ControlMessage): void;
      /** Once, when the channel ends for any reason (the peer closed, went silent, sent garbage, close()). */
      onClose?(reason: Error): void;
      heartbeatMs?: number;
      lostAfterMs?: number;
    } = {},
  ) {
    const lostAfterMs = o.lostAfterMs ?? HEARTBEAT_LOST_MS;
    this.timer = setInterval(() => {
      if (Date.now() - this.lastHeardMs > lostAfterMs) return this.close(new Error(`the peer sent nothing for ${lostAfterMs / 1000} s`));
      this.send({ type: 'ping' });
    }, o.heartbeatMs ?? HEARTBEAT_MS);
    socket.once('close', () => this.close(new Error('the control stream closed')));
    socket.on('error', () => {}); // seen as 'close'
    void this.readLoop();
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  send(m: ControlMessage): void {
    if (!this.closed && this.socket.writable) this.socket.write(encodeControl(m));
  }

  /** The next message of `type`; rejects when the channel closes, when the peer aborts, or after `timeoutMs`. */
  next<T extends ControlMessage['type']>(type: T, timeoutMs: number): Promise<Extract<ControlMessage, { type: T }>> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => done(new Error(`no ${type} from the peer within ${timeoutMs / 1000} s`)), timeoutMs);
      const waiter = {
        type,
        resolve: (m: ControlMessage) => done(undefined, m),
        reject: (e: Error) => done(e),
      };
      const done = (err?: Error, m?: ControlMessage) => {
        clearTimeout(timer);
        this.waiters.delete(waiter);
        if (err) reject(err);
        else resolve(m as Extract<ControlMessage, { type: T }>);
      };
      this.waiters.add(waiter);
    });
  }

  /** Ends the channel (idempotent); waiters reject with `reason`. */
  close(reason: Error = new Error('the control stream was closed')): void {
    if (this.closedWith) return;
    this.closedWith = reason;
    clearInterval(this.timer);
    this.socket.destroy();
    for (const w of [...this.waiters]) w.reject(reason);
    this.o.onClose?.(reason);
  }

  private async readLoop(): Promise<void> {
    while (!this.closed) {
      let m: ControlMessage;
      try {
        m = parseControl(await readLine(this.socket, MAX_CONTROL_LINE_BYTES, 'control'));
      } catch (err) {
        return this.close(err as Error);
      }
      this.lastHeardMs = Date.now();
      if (m.type === 'ping') continue;
      if (m.type === 'abort') for (const w of [...this.waiters]) w.reject(new Error(`the peer aborted: ${m.reason}`));
      for (const w of [...this.waiters]) if (w.type === m.type) w.resolve(m);
      this.o.onMessage?.(m);
    }
  }
}
