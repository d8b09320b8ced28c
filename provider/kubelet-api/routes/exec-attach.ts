// /exec and /attach/:namespace/:pod/:container (GET and POST), reached through
// kube-apiserver's nodes/proxy for `kubectl exec` and `kubectl attach`. The
// request arrives as an upgrade (see upgrade.ts: it has passed auth like any
// request, with verb create) to SPDY/3.1 or WebSocket; the query names the
// command (`command`, repeated) and the streams (`input`, `output`, `error`,
// `tty` = "1", or the PodExecOptions names stdin/stdout/stderr).
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BadRequestError } from '../errors.js';
import { acceptSpdy } from '../streaming/spdy.js';
import { acceptWebSocket, webSocketServer } from '../streaming/websocket.js';
import type { SessionLogger, StreamingConnection, StreamOptions } from '../streaming/connection.js';
import { SPDY_PROTOCOLS, WEBSOCKET_PROTOCOLS } from '../streaming/negotiate.js';
import { serveConsole, serveGuestExec } from '../streaming/session.js';
import { IdleTimer } from '../streaming/idle-timer.js';
import { releaseOnClose, type SessionLimiter } from '../session-limiter.js';
import { takeUpgrade } from '../upgrade.js';
import { negotiateUpgrade } from './negotiate-upgrade.js';
import type { VmAccess } from '../vm-access.js';
import { isSet, queryFlag } from './query-flag.js';
import { containerParamsSchema, type ContainerParams } from './container-params.js';

type Endpoint = 'exec' | 'attach';

interface Query {
  command?: string[];
  input?: string;
  output?: string;
  error?: string;
  tty?: string;
  stdin?: string;
  stdout?: string;
  stderr?: string;
}

const querySchema = {
  type: 'object',
  properties: {
    command: { type: 'array', items: { type: 'string' } },
    input: queryFlag,
    output: queryFlag,
    error: queryFlag,
    tty: queryFlag,
    stdin: queryFlag,
    stdout: queryFlag,
    stderr: queryFlag,
  },
} as const;

/** The kubelet's reading of the stream flags (remotecommand.NewOptions). */
export function streamOptions(q: Query): StreamOptions {
  const tty = isSet(q.tty);
  const options = {
    stdin: isSet(q.input) || isSet(q.stdin),
    stdout: isSet(q.output) || isSet(q.stdout),
    // A terminal has one output stream; clients do not open stderr with a TTY.
    stderr: !tty && (isSet(q.error) || isSet(q.stderr)),
    tty,
  };
  if (!options.stdin && !options.stdout && !options.stderr)
    throw new BadRequestError('you must specify at least 1 of stdin, stdout, stderr');
  return options;
}

/**
 * Where a session runs: the one rule. A guest has two ways in: its serial
 * console, a terminal with the guest's own shell already on it, and the QEMU
 * guest agent, which runs a given argv to completion. A session with stdin
 * (attach, `kubectl exec -i`/`-it`) types into the console, and an exec's
 * command is not run, since the console's shell is the terminal there is. An
 * exec without stdin runs its command through the agent (separate stdout and
 * stderr, real exit code).
 */
export function sessionTarget(endpoint: Endpoint, options: StreamOptions): 'console' | 'agent' {
  return endpoint === 'attach' || options.stdin ? 'console' : 'agent';
}

export interface ExecAttachOptions {
  vms: VmAccess;
  sessions: SessionLimiter;
  /** A console session without traffic for this long is closed (IdleTimer). */
  idleTimeoutMs: number;
}

export async function execAttachRoutes(app: FastifyInstance, opts: ExecAttachOptions): Promise<void> {
  const wss = webSocketServer();
  // server.close() waits for upgraded connections but never closes them: end
  // them here, or closing the API would wait for every session to end.
  const sockets = new Set<Duplex>();
  app.addHook('preClose', async () => {
    for (const socket of sockets) socket.destroy();
  });

  async function serve(
    endpoint: Endpoint,
    req: FastifyRequest<{ Params: ContainerParams; Querystring: Query }>,
    reply: FastifyReply,
  ): Promise<void> {
    const options = streamOptions(req.query);
    const command = req.query.command ?? [];
    if (endpoint === 'exec' && command.length === 0) throw new BadRequestError('missing command');
    const negotiated = negotiateUpgrade(req, reply, { spdy: SPDY_PROTOCOLS, websocket: WEBSOCKET_PROTOCOLS });
    const { namespace, pod, container } = req.params;
    const ref = { namespace, name: pod, container };
    const target = sessionTarget(endpoint, options);
    // Refused before anything is opened; once taken, the slot is held until
    // the connection closes, however the request ends from here (req.user is auth's).
    releaseOnClose(opts.sessions.acquire(req.user!, endpoint), req.raw.socket);
    // Attached before the upgrade so that an unknown pod is a plain 404, as the kubelet answers it.
    const serial = target === 'console' ? await opts.vms.attachConsole(ref) : undefined;

    reply.hijack();
    const log = req.log.child({ pod: `${namespace}/${pod}`, container, endpoint, target, transport: negotiated.transport });
    const upgrade = takeUpgrade(req.raw);
    sockets.add(upgrade.socket);
    upgrade.socket.once('close', () => sockets.delete(upgrade.socket));
    let conn: StreamingConnection;
    try {
      conn =
        negotiated.transport === 'spdy'
          ? await acceptSpdy(upgrade, negotiated.protocol, options, log)
          : await acceptWebSocket(wss, req.raw, upgrade, options, log);
    } catch (err) {
      serial?.destroy();
      log.warn({ err }, 'exec/attach session setup failed');
      return;
    }
    log.debug({ command }, 'exec/attach session started');
    if (serial) await serveConsoleUntilIdle(conn, serial, log);
    // A guest agent command ends within the launcher's guest exec timeout: no idle timer.
    else await serveGuestExec(conn, () => opts.vms.guestExec(ref, command), log);
    log.debug('exec/attach session ended');
  }

  async function serveConsoleUntilIdle(conn: StreamingConnection, serial: Duplex, log: SessionLogger): Promise<void> {
    const idle = new IdleTimer(opts.idleTimeoutMs);
    const session = serveConsole(conn, serial, log, idle.signal);
    // Now that the session reads them (see IdleTimer.watch).
    idle.watch([conn.stdin, conn.resize, serial]);
    await session;
    idle.stop();
  }

  for (const endpoint of ['exec', 'attach'] as const) {
    app.route<{ Params: ContainerParams; Querystring: Query }>({
      method: ['GET', 'POST'],
      url: `/${endpoint}/:namespace/:pod/:container`,
      schema: { params: containerParamsSchema, querystring: querySchema },
      handler: (req, reply) => serve(endpoint, req, reply),
    });
  }
}
