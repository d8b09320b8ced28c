// The informer against a server that answers like an API server without the
// resource: client-node lists and watches it over real HTTP.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import t from 'tap';
import { makeClients } from './client.js';
import { ClusterInformer } from './informer.js';

t.test('a resource the API server does not serve is reported once, with the hint, and retried slowly', async (t) => {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    requests.push(req.url ?? '');
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        kind: 'Status',
        apiVersion: 'v1',
        status: 'Failure',
        reason: 'NotFound',
        code: 404,
        message: 'the server could not find the requested resource',
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const kc = new KubeConfig();
  const server_ = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: server_, skipTLSVerify: true }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  const clients = makeClients(kc);
  const lines: { level: number; msg: string; retryInMs?: number }[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const informer = new ClusterInformer({
    clients,
    path: '/apis/kubevirt.io/v1/virtualmachineinstances',
    list: () => clients.custom.listClusterCustomObject({ group: 'kubevirt.io', version: 'v1', plural: 'virtualmachineinstances' }) as never,
    missingHint: 'install the CRDs',
    log,
  });
  // Started twice, as a cache two controllers share is: still one list and watch.
  void informer.start();
  void informer.start();
  t.teardown(() => informer.stop());
  // Long enough for a spinning retry (the old 500 ms, reset on every attempt) to have tried several times.
  await new Promise((r) => setTimeout(r, 2500));
  t.same(
    { requests: requests.length, warnings: lines.filter((l) => l.level === 40).map((l) => l.msg) },
    {
      requests: 1,
      warnings: ['the API server does not serve /apis/kubevirt.io/v1/virtualmachineinstances: install the CRDs; checking again every 30 s'],
    },
    'one list (however often started), one warning naming the resource and what to do',
  );
});
