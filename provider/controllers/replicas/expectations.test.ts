import t from 'tap';
import { EXPECTATION_TIMEOUT_MS, Expectations, type CacheView } from './expectations.js';

const view =
  (present: string[], deleting: string[] = []): CacheView =>
  (uid) =>
    deleting.includes(uid) ? 'deleting' : present.includes(uid) ? 'present' : 'absent';

t.test('scaling waits until the cache shows every create and delete of its own', async (t) => {
  const e = new Expectations();
  e.created('ns/rs', 'new', 0);
  e.deleted('ns/rs', 'old', 0);
  t.same(
    {
      neitherSeen: e.satisfied('ns/rs', view(['old']), 1),
      createSeen: e.satisfied('ns/rs', view(['old', 'new']), 2),
      deleteSeenAsDeleting: e.satisfied('ns/rs', view(['new'], ['old']), 3),
      otherKey: e.satisfied('ns/other', view([]), 3),
      afterward: e.satisfied('ns/rs', view(['old']), 4),
    },
    { neitherSeen: false, createSeen: false, deleteSeenAsDeleting: true, otherKey: true, afterward: true },
    'a seen create stays seen; once all are seen the key is free',
  );
});

t.test('an expectation never seen expires, so a lost event delays but never stops a controller', async (t) => {
  const e = new Expectations();
  e.created('ns/rs', 'lost', 1000);
  t.same(
    [e.satisfied('ns/rs', view([]), 1000 + EXPECTATION_TIMEOUT_MS), e.satisfied('ns/rs', view([]), 1001 + EXPECTATION_TIMEOUT_MS)],
    [false, true],
  );
  e.created('ns/rs', 'again', 0);
  e.forget('ns/rs');
  t.ok(e.satisfied('ns/rs', view([]), 1), 'a deleted controller forgets its expectations');
});
