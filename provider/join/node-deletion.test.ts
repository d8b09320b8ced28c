import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import t, { type Test } from 'tap';
import { KubeConfig } from '@kubernetes/client-node';
import { selfSigned } from '../../test/helpers/self-signed.js';
import { makeClients } from '../kube/client.js';
import { deleteOwnNode } from './node-deletion.js';

const tls = selfSigned('/CN=apiserver', 1);

/** An API server on loopback that answers DELETE /api/v1/nodes/<name> with `answer`, or never when it is undefined. */
async function apiServer(t: Test, answer?: { code: number; body: object }): Promise<{ url: string; requests: string[] }> {
  const requests: string[] = [];
  const sockets = new Set<Socket>();
  const server = createHttpsServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    requests.push(`${req.method} ${req.url}`);
    if (answer) res.writeHead(answer.code, { 'content-type': 'application/json' }).end(JSON.stringify(answer.body));
  });
  server.on('secureConnection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  const { port } = server.address() as { port: number };
  return { url: `https://127.0.0.1:${port}`, requests };
}

function clientsOf(url: string): ReturnType<typeof makeClients> {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'node-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return makeClients(kc);
}

t.test('an API server that never answers: the deletion gives up in the bounded time, saying what to run', async (t) => {
  const api = await apiServer(t);
  const started = Date.now();
  const outcome = await deleteOwnNode(clientsOf(api.url), 'node-a', 500);
  const tookMs = Date.now() - started;
  t.same(api.requests, ['DELETE /api/v1/nodes/node-a'], 'the request reached the server, which never answered it');
  t.ok(tookMs >= 450 && tookMs < 5000, `gave up after the bound (${tookMs} ms)`);
  t.same(outcome, {
    deleted: false,
    warning:
      'could not delete Node node-a (the API server did not answer within 0.5 s); the local take-down went on: once the control plane answers, delete it with: kubectl delete node node-a',
  });
});

t.test("a Node deleted, or already gone, counts as deleted; a refusal is reported with the server's message", async (t) => {
  const ok = await apiServer(t, { code: 200, body: { kind: 'Status', status: 'Success' } });
  t.same(await deleteOwnNode(clientsOf(ok.url), 'node-a', 5000), { deleted: true });
  const gone = await apiServer(t, {
    code: 404,
    body: { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404, message: 'nodes "node-a" not found' },
  });
  t.same(await deleteOwnNode(clientsOf(gone.url), 'node-a', 5000), { deleted: true });
  const denied = await apiServer(t, {
    code: 403,
    body: { kind: 'Status', status: 'Failure', reason: 'Forbidden', code: 403, message: 'nodes "node-a" is forbidden' },
  });
  const outcome = await deleteOwnNode(clientsOf(denied.url), 'node-a', 5000);
  t.match(outcome, {
    deleted: false,
    warning: /^could not delete Node node-a \(nodes "node-a" is forbidden\);.*kubectl delete node node-a$/,
  });
});
