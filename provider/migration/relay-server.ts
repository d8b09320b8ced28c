// The target end of the migration relay: one TLS listener per agent
// (--migration-port). Each stream says which migration it belongs to and what
// it carries; the server authorizes it (relay-auth.ts) on facts read afresh
// from the API on the migration's first stream, then hands a control stream
// to the target side and joins a data stream to the target launcher's socket.
// Its owner calls closeAll(uid) when the migration ends or is aborted: every
// stream of it closes and later ones are judged on fresh facts.
import { connect as connectUnix, type Socket } from 'node:net';
import { createServer, type Server, type TLSSocket } from 'node:tls';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../log.js';
import { encodeReply, MAX_HEADER_BYTES, parseHeader, type StreamHeader } from './frames.js';
import { joinLegs } from './legs.js';
import { readLine } from './line-reader.js';
import { authorizeStream, type CertSubject, type MigrationFacts } from './relay-auth.js';
import { HEADER_TIMEOUT_MS, keepAlive, relayTlsOptions, type RelayCredentials } from './relay-tls.js';

export interface AcceptedControl {
  uid: string;
  /** The source node, from its verified certificate. */
  peerNode: string;
  socket: TLSSocket;
}

export interface RelayServerOptions {
  selfNode: string;
  /** The node's kubelet-serving pair and the cluster CA that client certificates must chain to. */
  credentials: RelayCredentials;
  /** The migration's facts read afresh: its VMI from the API (not a cache) and the local target pod. */
  lookup(uid: string): Promise<MigrationFacts>;
  /** Takes an accepted control stream; the reply line is already sent. */
  onControl(stream: AcceptedControl): void;
  log: Logger;
  headerTimeoutMs?: number;
}

/** What the server keeps per migration once it accepted one of its streams. */
interface Session {
  facts: MigrationFacts;
  ready: boolean;
  legs: Set<Socket | TLSSocket>;
}

export class RelayServer {
  private readonly server: Server;
  private readonly sessions = new Map<string, Session>();
  /** Every connection, so close() ends those still reading their header too. */
  private readonly connections = new Set<TLSSocket>();
  private readonly log: Logger;

  constructor(private readonly opts: RelayServerOptions) {
    this.log = opts.log.child({ component: 'migration-relay' });
    this.server = createServer(
      { ...relayTlsOptions(opts.credentials), requestCert: true, rejectUnauthorized: true, handshakeTimeout: HEADER_TIMEOUT_MS },
      (socket) => void this.accept(socket),
    );
    this.server.on('tlsClientError', (err, socket) => {
      this.log.warn({ err, remote: socket.remoteAddress }, 'migration relay: TLS handshake refused');
    });
  }

  async listen(port: number, host?: string): Promise<AddressInfo> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    return this.server.address() as AddressInfo;
  }

  /** New connections use the rotated certificate; open ones keep theirs. */
  setCredentials(credentials: RelayCredentials): void {
    this.server.setSecureContext(relayTlsOptions(credentials));
  }

  /** The target sent `ready`: the migration's data streams may now come. */
  markReady(uid: string): void {
    const session = this.sessions.get(uid);
    if (session) session.ready = true;
  }

  /** Closes every stream of the migration; a later stream is judged on fresh facts. */
  closeAll(uid: string): void {
    const session = this.sessions.get(uid);
    this.sessions.delete(uid);
    for (const leg of session?.legs ?? []) leg.destroy();
  }

  /** Stops listening and closes every stream. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const uid of [...this.sessions.keys()]) this.closeAll(uid);
    for (const socket of this.connections) socket.destroy();
    await closed;
  }

  private async accept(socket: TLSSocket): Promise<void> {
    this.connections.add(socket);
    socket.once('close', () => this.connections.delete(socket));
    socket.on('error', () => {}); // seen as 'close'; refusals and ends are logged below
    keepAlive(socket);
    socket.setTimeout(this.opts.headerTimeoutMs ?? HEADER_TIMEOUT_MS, () => socket.destroy());
    let header: StreamHeader;
    try {
      header = parseHeader(await readLine(socket, MAX_HEADER_BYTES, 'header'));
    } catch (err) {
      return this.refuse(socket, undefined, (err as Error).message);
    }
    const log = this.log.child({ migration: header.uid, kind: header.kind, n: header.n });
    let session = this.sessions.get(header.uid);
    let facts = session?.facts;
    if (!facts) {
      try {
        facts = await this.opts.lookup(header.uid);
      } catch (err) {
        log.warn({ err }, 'migration relay: could not read the migration');
        return this.refuse(socket, header, `could not read migration ${header.uid}: ${(err as Error).message}`);
      }
    }
    const decision = authorizeStream({
      peer: socket.getPeerCertificate().subject as CertSubject | undefined,
      selfNode: this.opts.selfNode,
      header,
      facts,
      ready: session?.ready ?? false,
    });
    if (!decision.accept) return this.refuse(socket, header, decision.reason);
    // Gone while the facts were read (header timeout, server closing): nothing to keep.
    if (socket.destroyed) return;
    // closeAll may have run while the facts were read: a session is made only for a stream accepted now.
    session = this.sessions.get(header.uid) ?? { facts, ready: false, legs: new Set() };
    this.sessions.set(header.uid, session);
    this.track(session, socket);
    socket.setTimeout(0);
    if (decision.to.kind === 'control') {
      socket.write(encodeReply({ ok: true }));
      log.info({ peer: decision.peerNode }, 'migration relay: control stream accepted');
      return this.opts.onControl({ uid: header.uid, peerNode: decision.peerNode, socket });
    }
    const local = connectUnix(decision.to.path);
    this.track(session, local);
    let joined = false;
    local.once('connect', () => {
      joined = true;
      socket.write(encodeReply({ ok: true }));
      log.debug({ peer: decision.peerNode }, 'migration relay: stream joined');
      void joinLegs(socket, local);
    });
    local.once('error', (err: NodeJS.ErrnoException) => {
      // After the join, joinLegs sees the error as the leg's close.
      if (!joined) this.refuse(socket, header, `the target's ${header.kind} socket is not available (${err.code ?? err.message})`);
    });
  }

  private track(session: Session, leg: Socket | TLSSocket): void {
    session.legs.add(leg);
    leg.once('close', () => session.legs.delete(leg));
  }

  private refuse(socket: TLSSocket, header: StreamHeader | undefined, reason: string): void {
    this.log.warn({ migration: header?.uid, kind: header?.kind, remote: socket.remoteAddress, reason }, 'migration relay: stream refused');
    if (socket.writable) socket.end(encodeReply({ ok: false, reason }));
    else socket.destroy();
  }
}
