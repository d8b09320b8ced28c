import t from 'tap';
import { replacing } from './status-patch.js';

t.test('a replacing merge patch nulls what the old object had and the new one lacks, at every depth', async (t) => {
  const before = {
    migrationUid: 'm-1',
    failed: true,
    abortRequested: true,
    migrationConfiguration: { bandwidthPerMigration: '1Mi', progressTimeout: 150 },
  };
  const after = { migrationUid: 'm-2', targetNode: 'b', migrationConfiguration: { progressTimeout: 150 } };
  t.same(replacing(before, after), {
    migrationUid: 'm-2',
    failed: null,
    abortRequested: null,
    targetNode: 'b',
    migrationConfiguration: { bandwidthPerMigration: null, progressTimeout: 150 },
  });
  t.same([replacing(undefined, after), replacing(before, 'x')], [after, 'x'], 'nothing to replace: the new value as it is');
});
