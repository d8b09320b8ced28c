import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { get, type IncomingMessage } from 'node:http';
import path from 'node:path';
import Fastify from 'fastify';
import t, { type Test } from 'tap';
import { NotFoundError, errorHandler } from '../errors.js';
import type { VmAccess } from '../vm-access.js';
import { logRoutes } from './logs.js';
import { createAgentMetrics } from '../../metrics.js';
import { SessionLimiter } from '../session-limiter.js';
import { noVmis } from '../../../test/helpers/vm-access.js';

const record = (time: string, tag: 'F' | 'P', text: string) => `2024-05-01T${time}Z stdout ${tag} ${text}\n`;

/** vm1: an older segment, a current file with a line in pieces, a previous run. fresh: no previous run. */
function logDir(t: Test): string {
  const dir = t.testdir({
    vm1: {
      'console.log.1': record('11:59:00.000', 'F', 'kernel'),
      'console.log': [
        record('12:00:00.000', 'F', 'boot line 1'),
        record('12:00:01.000', 'F', 'boot line 2'),
        'not a CRI record\n',
        record('12:00:02.000', 'P', 'login: '),
        record('12:00:03.000', 'F', 'root'),
        record('12:00:04.000', 'F', '# ls'),
      ].join(''),
      'console.previous.log': record('10:00:00.000', 'F', 'last run'),
    },
    fresh: { 'console.log': '' },
  });
  return dir;
}

/** vm1 and fresh as above; gone: a pod whose console log has vanished. */
function fakeVms(dir: string): VmAccess {
  return {
    ...noVmis,
    async consoleLogPath(ref, previous) {
      if (ref.name !== 'vm1' && ref.name !== 'fresh' && ref.name !== 'gone')
        throw new NotFoundError(`pod ${ref.namespace}/${ref.name} not found`);
      return path.join(dir, ref.name, previous ? 'console.previous.log' : 'console.log');
    },
    attachConsole: () => Promise.reject(new Error('unused')),
    guestExec: () => Promise.reject(new Error('unused')),
    podPorts: () => Promise.reject(new Error('unused')),
    vncDisplay: () => Promise.reject(new Error('unused')),
    listVmUsage: async () => [],
  };
}

async function build(t: Test, dir: string, sessions = new SessionLimiter({ perNode: 100, perUser: 100 }, 'n1', createAgentMetrics())) {
  const app = Fastify();
  app.setErrorHandler(errorHandler);
  // What the auth hook sets on every request of the kubelet API.
  app.addHook('onRequest', async (req) => {
    req.user = { username: 'ops', groups: [] };
  });
  await app.register(logRoutes, { vms: fakeVms(dir), sessions, now: () => new Date('2024-05-01T12:00:05Z'), followPollMs: 50 });
  t.teardown(() => app.close());
  return app;
}

t.test('serves the console log the way the kubelet serves container logs', async (t) => {
  const app = await build(t, logDir(t));
  const cases: Record<string, string> = {
    all: '',
    tail2: 'tailLines=2',
    tail0: 'tailLines=0',
    limit: 'limitBytes=10',
    sinceTime: 'sinceTime=2024-05-01T12:00:01Z',
    sinceSeconds: 'sinceSeconds=3',
    timestamps: 'timestamps=true&tailLines=2',
    previous: 'previous=true',
    previousFollow: 'previous=true&follow=true',
  };
  const bodies: Record<string, string> = {};
  for (const [name, query] of Object.entries(cases)) {
    const res = await app.inject({ url: `/containerLogs/default/vm1/vm?${query}` });
    bodies[name] = `${res.statusCode} ${res.body}`;
  }
  t.same(bodies, {
    all: '200 kernel\nboot line 1\nboot line 2\nlogin: root\n# ls\n',
    tail2: '200 login: root\n# ls\n',
    tail0: '200 ',
    limit: '200 kernel\nboo',
    sinceTime: '200 boot line 2\nlogin: root\n# ls\n',
    sinceSeconds: '200 login: root\n# ls\n',
    timestamps: '200 2024-05-01T12:00:02.000Z login: root\n2024-05-01T12:00:04.000Z # ls\n',
    previous: '200 last run\n',
    previousFollow: '200 last run\n',
  });
});

t.test('bad queries are 400s naming the parameter; unknown pods and missing logs are 404s', async (t) => {
  const app = await build(t, logDir(t));
  const answers: Record<string, string> = {};
  for (const query of [
    'vm1?tailLines=-1',
    'vm1?limitBytes=0',
    'vm1?sinceSeconds=soon',
    'vm1?sinceTime=yesterday',
    'vm1?follow=maybe',
    'vm1?sinceSeconds=5&sinceTime=2024-05-01T12:00:00Z',
    'nope?',
    'fresh?previous=true',
  ]) {
    const res = await app.inject({ url: `/containerLogs/default/${query.replace('?', '/vm?')}` });
    answers[query] = `${res.statusCode} ${res.body}`;
  }
  t.match(answers, {
    'vm1?tailLines=-1': /^400 .*tailLines/,
    'vm1?limitBytes=0': /^400 .*limitBytes/,
    'vm1?sinceSeconds=soon': /^400 .*sinceSeconds/,
    'vm1?sinceTime=yesterday': /^400 .*sinceTime/,
    'vm1?follow=maybe': /^400 .*follow/,
    'vm1?sinceSeconds=5&sinceTime=2024-05-01T12:00:00Z': /^400 at most one of sinceTime or sinceSeconds/,
    'nope?': /^404 pod default\/nope not found/,
    'fresh?previous=true': /^404 no previous console log/,
  });
});

/** Reads a streamed response as it arrives. */
function follow(url: string) {
  let body = '';
  const waiters: (() => void)[] = [];
  let ended: () => void;
  const end = new Promise<void>((resolve) => (ended = resolve));
  const res = new Promise<IncomingMessage>((resolve) => {
    const req = get(url, (res) => {
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString();
        for (const w of waiters) w();
      });
      res.on('end', () => ended());
      resolve(res);
    });
    req.on('error', () => {});
  });
  return {
    res,
    /** Resolves when the server has ended the response. */
    end,
    get body() {
      return body;
    },
    until: (text: string) =>
      new Promise<void>((resolve) => {
        const check = () => body.includes(text) && resolve();
        waiters.push(check);
        check();
      }),
  };
}

t.test('follow streams appended lines, joins a line written in pieces, and carries on across rotation', async (t) => {
  const dir = logDir(t);
  const app = await build(t, dir);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const file = path.join(dir, 'vm1', 'console.log');
  const stream = follow(`http://127.0.0.1:${port}/containerLogs/default/vm1/vm?follow=true&tailLines=1&timestamps=true`);
  await stream.until('# ls\n');
  appendFileSync(file, record('12:00:06.000', 'P', 'half '));
  appendFileSync(file, record('12:00:07.000', 'F', 'and half'));
  await stream.until('and half\n');
  // The launcher's rotation: the file moves to .1 and a new one starts.
  renameSync(file, `${file}.1`);
  writeFileSync(file, record('12:00:08.000', 'F', 'after rotation'));
  await stream.until('after rotation\n');
  (await stream.res).destroy();
  t.equal(
    stream.body,
    '2024-05-01T12:00:04.000Z # ls\n2024-05-01T12:00:06.000Z half and half\n2024-05-01T12:00:08.000Z after rotation\n',
    'the tail, then appended lines whole, then the rotated-in file',
  );
});

t.test('follow ends at limitBytes, and closing the API ends open follows', async (t) => {
  const dir = logDir(t);
  const app = await build(t, dir);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const file = path.join(dir, 'vm1', 'console.log');
  const limited = follow(`http://127.0.0.1:${port}/containerLogs/default/vm1/vm?follow=true&tailLines=0&limitBytes=8`);
  const open = follow(`http://127.0.0.1:${port}/containerLogs/default/vm1/vm?follow=true&tailLines=0`);
  await Promise.all([limited.res, open.res]);
  appendFileSync(file, record('12:00:06.000', 'F', 'appended line'));
  await limited.end;
  await open.until('appended line\n');
  await app.close();
  await open.end;
  t.same({ limited: limited.body, open: open.body }, { limited: 'appended', open: 'appended line\n' });
});

t.test('a follow holds a streaming session slot until its response closes; over the cap it is a 429 with a Status', async (t) => {
  const metrics = createAgentMetrics();
  const app = await build(t, logDir(t), new SessionLimiter({ perNode: 10, perUser: 1 }, 'n1', metrics));
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const url = (pod: string, query: string) => `http://127.0.0.1:${port}/containerLogs/default/${pod}/vm?${query}`;
  const open = async () => (await metrics.streamingSessions.get()).values.find((v) => v.labels.endpoint === 'log')?.value ?? 0;
  const untilOpen = async (n: number) => {
    while ((await open()) !== n) await new Promise((r) => setTimeout(r, 5));
  };

  const held = follow(url('vm1', 'follow=true&tailLines=0'));
  await held.res;
  const refused = await fetch(url('vm1', 'follow=true'));
  const plain = await fetch(url('vm1', 'tailLines=1'));
  t.match(
    {
      refused: { status: refused.status, body: await refused.json() },
      plain: { status: plain.status, body: await plain.text() },
      open: await open(),
    },
    {
      refused: {
        status: 429,
        body: {
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          reason: 'TooManyRequests',
          code: 429,
          message: /too many streaming sessions for user "ops" on node n1/,
        },
      },
      plain: { status: 200, body: '# ls\n' },
      open: 1,
    },
    'a second follow is refused; a read to the end is no session',
  );
  (await held.res).destroy();
  await untilOpen(0);

  const gone = await fetch(url('gone', 'follow=true'));
  t.equal(gone.status, 404, 'a follow that fails after taking its slot');
  await untilOpen(0);
  const again = follow(url('vm1', 'follow=true&tailLines=1'));
  t.equal((await again.res).statusCode, 200, 'the slot is free again');
  await again.until('# ls\n');
  (await again.res).destroy();
  t.same(
    (await metrics.streamingSessionsRefused.get()).values.map((v) => ({ ...v.labels, value: v.value })),
    [{ limit: 'user', endpoint: 'log', value: 1 }],
  );
});
