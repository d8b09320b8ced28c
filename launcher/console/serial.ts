// One connection to the unix socket QEMU binds for the serial port. Output
// fans out to the log file and every attached stream; input from all streams
// is merged into the one connection. QEMU serves a single client, which is why
// the launcher holds the connection and streams never reach QEMU directly.
import type net from 'node:net';
import { connectNoFollow } from '../../vmm/no-follow.js';
import type { ConsoleLog } from './log-file.js';

export type ConsoleListener = (data: Buffer) => void;

export class SerialConsole {
  private readonly listeners = new Set<ConsoleListener>();
  private readonly closeListeners = new Set<() => void>();
  private closed = false;

  private constructor(
    private readonly socket: net.Socket,
    log: ConsoleLog,
  ) {
    socket.on('data', (data: Buffer) => {
      log.write(data);
      for (const l of this.listeners) l(data);
    });
    // QEMU closes its end when it exits; an error ends the connection too.
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      this.closed = true;
      for (const l of this.closeListeners) l();
      this.listeners.clear();
      this.closeListeners.clear();
    });
  }

  /**
   * `owners`: who may have bound the socket (libvirtd as root, passing QEMU the fd; QEMU itself where libvirt
   * cannot). QEMU's uid owns its directory, so the socket is reached without following a link planted there.
   */
  static async connect(socketPath: string, owners: readonly number[], log: ConsoleLog): Promise<SerialConsole> {
    return new SerialConsole(await connectNoFollow(socketPath, { owners }), log);
  }

  /** Output from now on goes to `onData`; `onClose` runs when QEMU's side ends. Returns detach. */
  attach(onData: ConsoleListener, onClose: () => void): () => void {
    if (this.closed) {
      onClose();
      return () => {};
    }
    this.listeners.add(onData);
    this.closeListeners.add(onClose);
    return () => {
      this.listeners.delete(onData);
      this.closeListeners.delete(onClose);
    };
  }

  write(data: Buffer): void {
    if (!this.closed) this.socket.write(data);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  close(): void {
    this.socket.destroy();
  }
}
