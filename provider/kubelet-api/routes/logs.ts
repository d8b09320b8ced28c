// GET /containerLogs/:namespace/:pod/:container: the VM's serial console log,
// which is what `kubectl logs` reads through kube-apiserver (nodes/proxy).
// The query is the kubelet's (PodLogOptions): follow, previous, timestamps,
// tailLines, limitBytes, sinceSeconds, sinceTime (RFC 3339).
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { BadRequestError, NotFoundError } from '../errors.js';
import { followConsoleLog, readConsoleLog, type ConsoleLogOptions } from '../logs/console-log.js';
import type { VmAccess } from '../vm-access.js';
import { releaseOnClose, type SessionLimiter } from '../session-limiter.js';
import { isSet, queryFlag } from './query-flag.js';
import { containerParamsSchema, type ContainerParams } from './container-params.js';

interface Query {
  follow?: string;
  previous?: string;
  timestamps?: string;
  tailLines?: number;
  limitBytes?: number;
  sinceSeconds?: number;
  sinceTime?: string;
}

// The bounds are the API server's PodLogOptions validation.
const querySchema = {
  type: 'object',
  properties: {
    follow: queryFlag,
    previous: queryFlag,
    timestamps: queryFlag,
    tailLines: { type: 'integer', minimum: 0 },
    limitBytes: { type: 'integer', minimum: 1 },
    sinceSeconds: { type: 'integer', minimum: 1 },
    sinceTime: { type: 'string', format: 'date-time' },
  },
} as const;

export interface LogRoutesOptions {
  vms: VmAccess;
  /** A follow is a streaming session: it takes a slot. */
  sessions: SessionLimiter;
  /** How often a follow checks the file without a file system event. */
  followPollMs?: number;
  /** For sinceSeconds. */
  now?: () => Date;
}

export async function logRoutes(app: FastifyInstance, opts: LogRoutesOptions): Promise<void> {
  const now = opts.now ?? (() => new Date());
  const followPollMs = opts.followPollMs ?? 1000;
  // A follow lasts until its client leaves. Closing the API ends them, and
  // waits for their responses to finish so that the server finds their
  // connections idle and closes them at once, not after the keep-alive timeout.
  const follows = new Set<{ stop: AbortController; done: Promise<void> }>();
  app.addHook('preClose', async () => {
    const open = [...follows];
    for (const follow of open) follow.stop.abort();
    await Promise.all(open.map((follow) => follow.done));
  });

  app.get<{ Params: ContainerParams; Querystring: Query }>(
    '/containerLogs/:namespace/:pod/:container',
    { schema: { params: containerParamsSchema, querystring: querySchema } },
    async (req, reply) => {
      const q = req.query;
      if (q.sinceSeconds !== undefined && q.sinceTime !== undefined)
        throw new BadRequestError('at most one of sinceTime or sinceSeconds may be specified');
      const { namespace, pod, container } = req.params;
      const previous = isSet(q.previous);
      const file = await opts.vms.consoleLogPath({ namespace, name: pod, container }, previous);
      const options: ConsoleLogOptions = {
        timestamps: isSet(q.timestamps),
        tailLines: q.tailLines,
        limitBytes: q.limitBytes,
        sinceMs:
          q.sinceSeconds !== undefined
            ? now().getTime() - q.sinceSeconds * 1000
            : q.sinceTime !== undefined
              ? Date.parse(q.sinceTime)
              : undefined,
      };
      void reply.type('text/plain');
      try {
        // A previous run's log does not grow: read it to its end, as the kubelet does for a terminated container.
        if (!isSet(q.follow) || previous) return reply.send(await readConsoleLog(file, options));
        // Held until the response closes, whether it follows or fails (req.user is auth's).
        releaseOnClose(opts.sessions.acquire(req.user!, 'log'), reply.raw);
        const follow = { stop: new AbortController(), done: new Promise<void>((resolve) => reply.raw.once('close', resolve)) };
        follows.add(follow);
        void follow.done.then(() => {
          follow.stop.abort();
          follows.delete(follow);
        });
        const chunks = await followConsoleLog(file, options, { pollMs: followPollMs, signal: follow.stop.signal });
        // Send the head as soon as fastify starts streaming (it holds it back
        // for the first chunk): the client learns at once that it is following,
        // even if the console stays quiet.
        reply.raw.once('pipe', () => reply.raw.flushHeaders());
        return reply.send(Readable.from(chunks, { objectMode: false }));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
          throw new NotFoundError(`no ${previous ? 'previous ' : ''}console log for container "${container}" in pod ${namespace}/${pod}`, {
            cause: err,
          });
        }
        throw err;
      }
    },
  );
}
