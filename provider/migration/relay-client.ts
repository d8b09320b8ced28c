// The source end of the migration relay. The source agent opens unix
// listeners where its launcher's libvirtd and QEMU will connect (the
// `migrate_uri`, `disks_uri` and destination URI of the migration); each
// connection becomes a new TLS stream to the target node's relay, which must
// present that node's certificate, and is joined to it both ways. The control
// stream is dialled directly. closeAll(uid) ends every stream and listener of
// a migration.
import { chmod, chown, lstat, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { checkServerIdentity, connect as connectTls, type PeerCertificate, type TLSSocket } from 'node:tls';
import type { Logger } from '../log.js';
import { encodeHeader, MAX_HEADER_BYTES, parseReply, type StreamKind } from './frames.js';
import { joinLegs } from './legs.js';
import { readLine } from './line-reader.js';
import { nodeOfCertificate, type CertSubject } from './relay-auth.js';
import { HEADER_TIMEOUT_MS, keepAlive, relayTlsOptions, type RelayCredentials } from './relay-tls.js';

/** Where a migration's streams go: the target node by name, reached at its InternalIP and migration port. */
export interface RelayTarget {
  uid: string;
  node: string;
  address: string;
  port: number;
}

export interface RelayClientOptions {
  /** The node's client certificate and the cluster CA; called per stream, so a rotated certificate is picked up. */
  credentials(): Promise<RelayCredentials> | RelayCredentials;
  log: Logger;
  /** Connect, handshake and reply within this time. */
  dialTimeoutMs?: number;
}

/** The target refused the stream (relay-auth.ts's reason) or presented the wrong certificate. */
export class RelayRefusedError extends Error {
  readonly kind = 'RelayRefusedError';
  constructor(message: string) {
    super(message);
    this.name = 'RelayRefusedError';
  }
}

interface Migration {
  listeners: Map<string, Server>;
  legs: Set<Socket | TLSSocket>;
}

export class RelayClient {
  private readonly migrations = new Map<string, Migration>();
  private readonly log: Logger;

  constructor(private readonly opts: RelayClientOptions) {
    this.log = opts.log.child({ component: 'migration-relay' });
  }

  /** A stream of `kind` to the target, once the target accepted it; closeAll(target.uid) closes it. */
  async dial(target: RelayTarget, kind: StreamKind, n: number): Promise<TLSSocket> {
    const socket = connectTls({
      host: target.address,
      port: target.port,
      ...relayTlsOptions(await this.opts.credentials()),
      // The address must be in the certificate, and the certificate must be the target node's own.
      checkServerIdentity: (host: string, cert: PeerCertificate) =>
        checkServerIdentity(host, cert) ??
        (nodeOfCertificate(cert.subject as CertSubject) === target.node
          ? undefined
          : new RelayRefusedError(`the relay at ${host} presents ${JSON.stringify(cert.subject?.CN)}, not node ${target.node}`)),
    });
    this.track(target.uid, socket);
    socket.on('error', () => {}); // the handshake rejects below; later errors close the pair
    keepAlive(socket);
    socket.setTimeout(this.opts.dialTimeoutMs ?? HEADER_TIMEOUT_MS, () => socket.destroy(new Error('timed out')));
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('secureConnect', resolve);
        socket.once('error', reject);
        socket.once('close', () => reject(new Error('closed')));
      });
      socket.write(encodeHeader({ uid: target.uid, kind, n }));
      const reply = parseReply(await readLine(socket, MAX_HEADER_BYTES, 'reply'));
      if (!reply.ok) throw new RelayRefusedError(`node ${target.node} refused the ${kind} stream: ${reply.reason}`);
    } catch (err) {
      socket.destroy();
      if (err instanceof RelayRefusedError) throw err;
      throw new Error(`migration relay to node ${target.node} at ${target.address}:${target.port}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    socket.setTimeout(0);
    return socket;
  }

  /**
   * Listens at `path` (mode 0600, owned by `owner` when given) until
   * closeAll(target.uid); each connection is relayed as a new `kind`
   * stream, numbered from 0. The directory must be private: the socket is
   * made before its mode is narrowed. A stale socket at `path` is replaced.
   */
  async listen(
    target: RelayTarget,
    kind: Exclude<StreamKind, 'control'>,
    path: string,
    owner?: { uid: number; gid: number },
  ): Promise<void> {
    const migration = this.migration(target.uid);
    if (migration.listeners.has(path)) return;
    await removeStaleSocket(path);
    let n = 0;
    const server = createServer((local) => void this.relay(target, kind, n++, local));
    migration.listeners.set(path, server);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(path, () => resolve());
      });
      await chmod(path, 0o600);
      if (owner) await chown(path, owner.uid, owner.gid);
    } catch (err) {
      await this.closeListener(migration, path);
      throw new Error(`migration relay: cannot listen at ${path}: ${(err as Error).message}`, { cause: err });
    }
  }

  /** Closes the migration's listeners (removing their sockets) and every stream of it. */
  async closeAll(uid: string): Promise<void> {
    const migration = this.migrations.get(uid);
    if (!migration) return;
    this.migrations.delete(uid);
    for (const leg of migration.legs) leg.destroy();
    await Promise.all([...migration.listeners.keys()].map((path) => this.closeListener(migration, path)));
  }

  async close(): Promise<void> {
    await Promise.all([...this.migrations.keys()].map((uid) => this.closeAll(uid)));
  }

  private async relay(target: RelayTarget, kind: StreamKind, n: number, local: Socket): Promise<void> {
    const log = this.log.child({ migration: target.uid, kind, n });
    this.track(target.uid, local);
    local.on('error', () => {}); // seen as 'close'
    let remote: TLSSocket;
    try {
      remote = await this.dial(target, kind, n);
    } catch (err) {
      log.warn({ err }, 'migration relay: stream not opened');
      return void local.destroy();
    }
    if (local.destroyed) return void remote.destroy();
    log.debug('migration relay: stream joined');
    await joinLegs(local, remote);
    log.debug({ sentBytes: remote.bytesWritten, receivedBytes: remote.bytesRead }, 'migration relay: stream closed');
  }

  private migration(uid: string): Migration {
    let m = this.migrations.get(uid);
    if (!m) this.migrations.set(uid, (m = { listeners: new Map(), legs: new Set() }));
    return m;
  }

  /** closeAll(uid) destroys the leg; a migration with neither legs nor listeners left is forgotten. */
  private track(uid: string, leg: Socket | TLSSocket): void {
    const migration = this.migration(uid);
    migration.legs.add(leg);
    leg.once('close', () => {
      migration.legs.delete(leg);
      if (migration.legs.size === 0 && migration.listeners.size === 0 && this.migrations.get(uid) === migration)
        this.migrations.delete(uid);
    });
  }

  private async closeListener(migration: Migration, path: string): Promise<void> {
    const server = migration.listeners.get(path);
    migration.listeners.delete(path);
    if (server?.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    await rm(path, { force: true });
  }
}

/** A socket left by an earlier agent blocks listen(); anything else at the path is not ours to remove. */
async function removeStaleSocket(path: string): Promise<void> {
  const st = await lstat(path).catch(() => undefined);
  if (!st) return;
  if (!st.isSocket()) throw new Error(`migration relay: ${path} exists and is not a socket`);
  await rm(path);
}
