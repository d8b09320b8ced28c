import { EventEmitter } from 'node:events';
import t from 'tap';
import { createAgentMetrics } from '../metrics.js';
import type { UserInfo } from './auth.js';
import { releaseOnClose, SessionLimiter, type SessionLimits } from './session-limiter.js';

function limiter(limits: SessionLimits) {
  const metrics = createAgentMetrics();
  const sessions = new SessionLimiter(limits, 'n1', metrics);
  const open = async () => (await metrics.streamingSessions.get()).values.reduce((sum, v) => sum + v.value, 0);
  const refused = async () =>
    Object.fromEntries(
      (await metrics.streamingSessionsRefused.get()).values.map((v) => [`${v.labels.limit} ${v.labels.endpoint}`, v.value]),
    );
  return { sessions, open, refused };
}

const alice: UserInfo = { username: 'alice', uid: '1', groups: [] };
const aliceReborn: UserInfo = { username: 'alice', uid: '2', groups: [] };
const bob: UserInfo = { username: 'bob', groups: [] };

t.test('each user gets up to its cap; a user is its username and uid', async (t) => {
  const { sessions, open, refused } = limiter({ perNode: 10, perUser: 2 });
  sessions.acquire(alice, 'exec');
  sessions.acquire(alice, 'log');
  t.throws(() => sessions.acquire(alice, 'attach'), {
    kind: 'SessionLimit',
    limit: 'user',
    message: /too many streaming sessions for user "alice" on node n1 \(limit 2, --max-streaming-sessions-per-user\)/,
  });
  t.doesNotThrow(() => sessions.acquire(aliceReborn, 'attach'), 'the same name with another uid is another user');
  t.doesNotThrow(() => sessions.acquire(bob, 'attach'));
  t.same({ open: await open(), refused: await refused() }, { open: 4, refused: { 'user attach': 1 } });
});

t.test('the node cap counts every user', async (t) => {
  const { sessions, refused } = limiter({ perNode: 2, perUser: 5 });
  sessions.acquire(alice, 'attach');
  sessions.acquire(bob, 'exec');
  t.throws(() => sessions.acquire(aliceReborn, 'log'), {
    kind: 'SessionLimit',
    limit: 'node',
    message: /too many streaming sessions on node n1 \(limit 2, --max-streaming-sessions\)/,
  });
  t.same(await refused(), { 'node log': 1 });
});

t.test('a slot released frees its place for its user and the node, once however often it is released', async (t) => {
  const { sessions, open } = limiter({ perNode: 2, perUser: 1 });
  const first = sessions.acquire(alice, 'attach');
  sessions.acquire(bob, 'attach');
  first.release();
  first.release();
  first.release();
  t.equal(await open(), 1, 'one release counted');
  sessions.acquire(alice, 'attach');
  t.throws(
    () => sessions.acquire(aliceReborn, 'attach'),
    { limit: 'node', message: /on node n1/ },
    'the extra releases gave nobody a slot',
  );
  t.throws(() => sessions.acquire(alice, 'attach'), { limit: 'user', message: /for user "alice"/ });
});

t.test('releaseOnClose releases when the connection closes, or at once when it has closed already', async (t) => {
  const { sessions, open } = limiter({ perNode: 5, perUser: 5 });
  const connection = Object.assign(new EventEmitter(), { closed: false });
  releaseOnClose(sessions.acquire(alice, 'exec'), connection);
  releaseOnClose(sessions.acquire(alice, 'exec'), { closed: true, once: () => t.fail('no wait on a closed connection') });
  t.equal(await open(), 1);
  connection.emit('close');
  connection.emit('close');
  t.equal(await open(), 0);
});
