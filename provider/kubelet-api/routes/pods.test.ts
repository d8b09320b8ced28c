import t from 'tap';
import { pino } from 'pino';
import type { V1Pod } from '@kubernetes/client-node';
import type { AuthBackend } from '../auth.js';
import { buildKubeletApi } from '../server.js';

const backend: AuthBackend = {
  reviewToken: async (token) => (token === 'tok' ? { username: 'ops', groups: [] } : null),
  authorize: async () => ({ allowed: true }),
};

const pod = (name: string, phase: string): V1Pod => ({ metadata: { name, namespace: 'ns1', uid: `uid-${name}` }, status: { phase } });

t.test('/runningpods/ lists only the pods whose VM is running', async (t) => {
  const app = await buildKubeletApi({
    nodeName: 'n1',
    backend,
    listPods: () => [pod('a', 'Running'), pod('b', 'Pending'), pod('c', 'Succeeded'), pod('d', 'Running')],
    log: pino({ level: 'silent' }),
    nodeStats: { startTime: new Date(0), readUsage: () => Promise.reject(new Error('not in this test')) },
  });
  t.teardown(() => app.close());
  const names = async (url: string) => {
    const res = await app.inject({ url, headers: { authorization: 'Bearer tok' } });
    const body = res.json() as { kind: string; items: V1Pod[] };
    return { status: res.statusCode, kind: body.kind, names: body.items.map((p) => p.metadata?.name) };
  };
  t.same(
    [await names('/runningpods/'), await names('/runningpods'), await names('/pods')],
    [
      { status: 200, kind: 'PodList', names: ['a', 'd'] },
      { status: 200, kind: 'PodList', names: ['a', 'd'] },
      { status: 200, kind: 'PodList', names: ['a', 'b', 'c', 'd'] },
    ],
  );
});
