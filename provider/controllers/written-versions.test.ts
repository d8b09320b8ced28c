import t from 'tap';
import { olderVersion, WrittenVersions } from './written-versions.js';

t.test('resourceVersions compare as integers, anything else is never older', async (t) => {
  t.ok(olderVersion('99', '100'));
  t.notOk(olderVersion('100', '100'));
  t.notOk(olderVersion('abc', '100'));
  t.notOk(olderVersion(undefined, '1'));
});

t.test('a cached object older than the last write is stale until the cache catches up', async (t) => {
  const w = new WrittenVersions();
  w.record('ns/a', '10');
  t.ok(w.stale('ns/a', { metadata: { resourceVersion: '9' } }), 'older than the write');
  t.notOk(w.stale('ns/a', { metadata: { resourceVersion: '11' } }), 'caught up');
  t.notOk(w.stale('ns/a', { metadata: { resourceVersion: '9' } }), 'forgotten once caught up');
  t.notOk(w.stale('ns/b', { metadata: { resourceVersion: '1' } }), 'never written');
});
