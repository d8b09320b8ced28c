import t, { type Test } from 'tap';
import { pino } from 'pino';
import type { AuthBackend, UserInfo } from './auth.js';
import { nodeAttributes } from './auth.js';
import { buildKubeletApi } from './server.js';

function fakeBackend(tokens: Record<string, UserInfo>, allowed: (u: UserInfo, sub: string) => boolean) {
  const calls = { tokenReviews: 0, sars: [] as string[] };
  const backend: AuthBackend = {
    async reviewToken(token) {
      calls.tokenReviews++;
      return tokens[token] ?? null;
    },
    async authorize(user, attrs) {
      calls.sars.push(`${user.username} ${attrs.verb} nodes/${attrs.subresource} ${attrs.name}`);
      return allowed(user, attrs.subresource ?? '') ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
    },
  };
  return { backend, calls };
}

async function build(t: Test, backend: AuthBackend) {
  const app = await buildKubeletApi({ nodeName: 'n1', backend, listPods: () => [], log: pino({ level: 'silent' }) });
  t.teardown(() => app.close());
  return app;
}

t.test('anonymous requests get 401', async (t) => {
  const { backend } = fakeBackend({}, () => true);
  const app = await build(t, backend);
  for (const url of ['/healthz', '/pods', '/stats/summary']) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 401, `${url} without credentials`);
  }
  t.equal((await app.inject({ url: '/pods', headers: { authorization: 'Bearer unknown' } })).statusCode, 401, 'unknown token');
});

t.test('an authenticated user without nodes/proxy gets 403 naming the attributes', async (t) => {
  const { backend, calls } = fakeBackend({ tok: { username: 'alice', groups: ['dev'] } }, () => false);
  const app = await build(t, backend);
  const res = await app.inject({ url: '/pods', headers: { authorization: 'Bearer tok' } });
  t.match({ code: res.statusCode, body: res.body }, { code: 403, body: /user=alice, verb=get, resource=nodes, subresource=proxy/ });
  t.same(calls.sars, ['alice get nodes/proxy n1']);
});

t.test('an authorized user is served, and decisions are cached', async (t) => {
  const { backend, calls } = fakeBackend({ tok: { username: 'ops', groups: [] } }, (_u, sub) => sub === 'proxy');
  const app = await build(t, backend);
  const first = await app.inject({ url: '/pods', headers: { authorization: 'Bearer tok' } });
  const second = await app.inject({ url: '/healthz', headers: { authorization: 'Bearer tok' } });
  t.match(
    { first: first.statusCode, second: second.statusCode, list: first.json() },
    { first: 200, second: 200, list: { kind: 'PodList', items: [] } },
  );
  t.same(
    { tokenReviews: calls.tokenReviews, sars: calls.sars.length },
    { tokenReviews: 1, sars: 1 },
    'one TokenReview and one SAR for two requests',
  );
});

t.test('paths map to node subresources as the kubelet maps them', async (t) => {
  t.same(
    ['/stats/summary', '/metrics/resource', '/metrics', '/logs/x', '/containerLogs/a/b/c', '/exec/a/b/c', '/pods'].map(
      (p) => nodeAttributes('GET', p).subresource,
    ),
    ['stats', 'metrics', 'metrics', 'log', 'proxy', 'proxy', 'proxy'],
  );
  t.same(
    ['POST /exec/a/b/c', 'GET /exec/a/b/c', 'GET /attach/a/b/c', 'GET /portForward/a/b', 'GET /vnc/a/b', 'GET /containerLogs/a/b/c'].map(
      (r) => nodeAttributes(r.split(' ')[0]!, r.split(' ')[1]!).verb,
    ),
    ['create', 'create', 'create', 'create', 'create', 'get'],
    'exec, attach, port-forward and VNC are create whatever the method (WebSocket clients use GET)',
  );
});

t.test('a cached decision is reused only for the same username, uid, groups and extra', async (t) => {
  const tokens: Record<string, UserInfo> = {
    first: { username: 'alice', uid: '1', groups: ['dev'], extra: { scopes: ['a'], team: ['x'] } },
    sameAgain: { username: 'alice', uid: '1', groups: ['dev'], extra: { team: ['x'], scopes: ['a'] } },
    otherUid: { username: 'alice', uid: '2', groups: ['dev'], extra: { scopes: ['a'], team: ['x'] } },
    noUid: { username: 'alice', groups: ['dev'], extra: { scopes: ['a'], team: ['x'] } },
    otherGroups: { username: 'alice', uid: '1', groups: ['dev', 'admins'], extra: { scopes: ['a'], team: ['x'] } },
    otherExtra: { username: 'alice', uid: '1', groups: ['dev'], extra: { scopes: ['a', 'b'], team: ['x'] } },
    noExtra: { username: 'alice', uid: '1', groups: ['dev'] },
  };
  const reviewed: UserInfo[] = [];
  const backend: AuthBackend = {
    reviewToken: async (token) => tokens[token] ?? null,
    async authorize(user) {
      reviewed.push(user);
      // Only the first identity may: a shared decision would let the others in.
      return { allowed: user === tokens.first || user === tokens.sameAgain };
    },
  };
  const app = await build(t, backend);
  const status = async (token: string) => (await app.inject({ url: '/pods', headers: { authorization: `Bearer ${token}` } })).statusCode;
  const answers: Record<string, number> = {};
  for (const token of Object.keys(tokens)) answers[token] = await status(token);
  t.same(answers, { first: 200, sameAgain: 200, otherUid: 403, noUid: 403, otherGroups: 403, otherExtra: 403, noExtra: 403 });
  t.same(
    reviewed,
    [tokens.first, tokens.otherUid, tokens.noUid, tokens.otherGroups, tokens.otherExtra, tokens.noExtra],
    'one SubjectAccessReview per identity; extra listed in another order is the same identity',
  );
});
