// The API clients against a real TLS server: requests share one keep-alive
// connection instead of a TLS handshake each (client-node's default).
import { webcrypto } from 'node:crypto';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { KubeConfig } from '@kubernetes/client-node';
import { EC, issue, newCa } from '../../test/helpers/fake-ca.js';
import { makeClients } from './client.js';

t.test('API calls of every client share one TLS connection to the API server', async (t) => {
  const ca = await newCa();
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const sans = new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }]);
  const cert = await issue(ca, keys.publicKey, 'CN=kube-apiserver', new Date(Date.now() - 60_000), new Date(Date.now() + 3600_000), [sans]);
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  const seen: { handshakes: number; requests: string[]; auth: Set<string | undefined> } = { handshakes: 0, requests: [], auth: new Set() };
  const server = createServer({ cert, key: `-----BEGIN PRIVATE KEY-----\n${pkcs8}\n-----END PRIVATE KEY-----\n` }, (req, res) => {
    seen.requests.push(`${req.method} ${req.url}`);
    seen.auth.add(req.headers.authorization);
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: {}, items: [] }));
  });
  server.on('secureConnection', () => seen.handshakes++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())).then(() => server.closeAllConnections()));

  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      { name: 'c', server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caData: Buffer.from(ca.pem).toString('base64') },
    ],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u', namespace: 'team' }],
    currentContext: 'x',
  });
  const clients = makeClients(kc);
  for (let i = 0; i < 3; i++) await clients.core.listNamespacedPod({ namespace: 'team' });
  await clients.custom.listNamespacedCustomObject({
    group: 'kubevirt.io',
    version: 'v1',
    namespace: 'team',
    plural: 'virtualmachineinstances',
  });
  t.same(
    { ...seen, auth: [...seen.auth] },
    {
      handshakes: 1,
      requests: [
        'GET /api/v1/namespaces/team/pods',
        'GET /api/v1/namespaces/team/pods',
        'GET /api/v1/namespaces/team/pods',
        'GET /apis/kubevirt.io/v1/namespaces/team/virtualmachineinstances',
      ],
      auth: ['Bearer secret-token'],
    },
    'four calls, two clients, one handshake; each call still carries the kubeconfig credentials',
  );
});

t.test('closeConnections fails a request stuck on a silent connection at once, and the next request connects anew', async (t) => {
  const ca = await newCa();
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const sans = new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }]);
  const cert = await issue(ca, keys.publicKey, 'CN=kube-apiserver', new Date(Date.now() - 60_000), new Date(Date.now() + 3600_000), [sans]);
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  let handshakes = 0;
  let silent = true;
  const server = createServer({ cert, key: `-----BEGIN PRIVATE KEY-----\n${pkcs8}\n-----END PRIVATE KEY-----\n` }, (req, res) => {
    // As a half-open connection: the request arrives, no answer ever comes.
    if (silent) return;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: {}, items: [] }));
  });
  server.on('secureConnection', () => handshakes++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      { name: 'c', server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caData: Buffer.from(ca.pem).toString('base64') },
    ],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u', namespace: 'team' }],
    currentContext: 'x',
  });
  const clients = makeClients(kc);
  const stuck = clients.core.listNamespacedPod({ namespace: 'team' }).then(
    () => 'answered',
    (err: Error) => `failed: ${err.message}`,
  );
  while (handshakes === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  silent = false;
  clients.closeConnections();
  const next = await clients.core.listNamespacedPod({ namespace: 'team' });
  t.match(
    { stuck: await stuck, next: next.items, handshakes },
    { stuck: /^failed: /, next: [], handshakes: 2 },
    'the stuck request failed instead of waiting forever; the next one was answered on a new connection',
  );
});
