// The informer against a fake API server whose watch goes silent without
// closing (a half-open connection): client-node lists and watches over real
// HTTP, and the progress deadline must end the silent watch so that the next
// one, from the same resource version, delivers what happened meanwhile.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { makeClients } from './client.js';
import { ClusterInformer } from './informer.js';

const pod = (name: string, resourceVersion: string) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default', uid: `uid-${name}`, resourceVersion },
});

interface FakeApiServer {
  lists: number;
  /** The query of each watch request, in order. */
  watches: URLSearchParams[];
}

/** Lists `a` at resourceVersion 10; each watch is answered by `onWatch`. */
async function fakeApiServer(t: Test, onWatch: (res: ServerResponse, n: number) => void): Promise<{ server: FakeApiServer; url: string }> {
  const state: FakeApiServer = { lists: 0, watches: [] };
  const open = new Set<ServerResponse>();
  const http = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    res.writeHead(200, { 'content-type': 'application/json' });
    if (url.searchParams.get('watch') !== 'true') {
      state.lists++;
      res.end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '10' }, items: [pod('a', '5')] }));
      return;
    }
    state.watches.push(url.searchParams);
    open.add(res);
    res.on('close', () => open.delete(res));
    onWatch(res, state.watches.length);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const res of open) res.destroy();
    return new Promise<void>((resolve) => http.close(() => resolve()));
  });
  return { server: state, url: `http://127.0.0.1:${(http.address() as AddressInfo).port}` };
}

function informerOf(t: Test, url: string, progressDeadlineMs: number) {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  const clients = makeClients(kc, { watchProgressDeadlineMs: progressDeadlineMs });
  const warnings: string[] = [];
  const log = pino(
    { level: 'warn' },
    { write: (line: string) => void warnings.push((JSON.parse(line) as { err?: { message: string } }).err?.message ?? '') },
  );
  const informer = new ClusterInformer<V1Pod>({ clients, path: '/api/v1/pods', list: () => clients.core.listPodForAllNamespaces(), log });
  t.teardown(() => informer.stop());
  return { informer, warnings };
}

t.test('a watch that goes silent is ended by the progress deadline and watched again from its resource version', async (t) => {
  const { server, url } = await fakeApiServer(t, (res, n) => {
    res.write(''); // the response starts, then nothing: the connection stays open and says nothing
    // The second watch (from resourceVersion 10) delivers what the first one never did.
    if (n === 2) res.write(JSON.stringify({ type: 'ADDED', object: pod('b', '11') }) + '\n');
  });
  const { informer, warnings } = informerOf(t, url, 300);
  const seenB = new Promise<void>((resolve) => informer.onChange((p) => p.metadata?.name === 'b' && resolve()));
  await informer.start();
  let deadline: NodeJS.Timeout | undefined;
  await Promise.race([
    seenB,
    new Promise((_, reject) => {
      deadline = setTimeout(() => reject(new Error(`pod b never arrived; watches: ${server.watches.length}`)), 20_000);
    }),
  ]).finally(() => clearTimeout(deadline));
  t.same(
    {
      cached: informer.list().map((p) => p.metadata?.name),
      lists: server.lists,
      watches: server.watches.slice(0, 2).map((q) => ({
        resourceVersion: q.get('resourceVersion'),
        bookmarks: q.get('allowWatchBookmarks'),
        timeoutSeconds: q.get('timeoutSeconds'),
      })),
      warned: warnings.some((w) => /delivered nothing \(not even a bookmark\) for 0\.3 s/.test(w)),
    },
    {
      cached: ['a', 'b'],
      lists: 1,
      // The server is asked to end it first (a tenth before the deadline, at least 1 s): this one ignores that.
      watches: [
        { resourceVersion: '10', bookmarks: 'true', timeoutSeconds: '1' },
        { resourceVersion: '10', bookmarks: 'true', timeoutSeconds: '1' },
      ],
      warned: true,
    },
    'the silent watch was given up and the next one, from the same resource version, brought the pod created meanwhile',
  );
});

t.test('bookmarks keep a quiet watch alive', async (t) => {
  const { server, url } = await fakeApiServer(t, (res) => {
    let rv = 10;
    const bookmark = () =>
      res.write(
        JSON.stringify({ type: 'BOOKMARK', object: { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: String(++rv) } } }) + '\n',
      );
    const timer = setInterval(bookmark, 100);
    res.on('close', () => clearInterval(timer));
  });
  // Margins wide enough for a loaded machine: bookmarks every 0.1 s against a 2 s deadline, for 3 s.
  const { informer, warnings } = informerOf(t, url, 2000);
  await informer.start();
  await new Promise((r) => setTimeout(r, 3000));
  t.same({ watches: server.watches.length, warnings }, { watches: 1, warnings: [] }, 'one watch throughout, no stall reported');
});

t.test('a quiet watch the API server ends at its timeout is renewed from its resource version, without a warning', async (t) => {
  const { server, url } = await fakeApiServer(t, (res, n) => {
    // The first watch ends as the API server ends one at timeoutSeconds: cleanly, having said nothing.
    if (n === 1) return void res.end();
    res.write(JSON.stringify({ type: 'ADDED', object: pod('b', '11') }) + '\n');
  });
  const { informer, warnings } = informerOf(t, url, 20_000);
  const seenB = new Promise<void>((resolve) => informer.onChange((p) => p.metadata?.name === 'b' && resolve()));
  await informer.start();
  await seenB;
  t.same(
    {
      lists: server.lists,
      watches: server.watches.map((q) => ({ resourceVersion: q.get('resourceVersion'), timeoutSeconds: q.get('timeoutSeconds') })),
      warnings,
    },
    {
      lists: 1,
      watches: [
        { resourceVersion: '10', timeoutSeconds: '18' },
        { resourceVersion: '10', timeoutSeconds: '18' },
      ],
      warnings: [],
    },
    'watched again from resource version 10, no list, no warning',
  );
});
