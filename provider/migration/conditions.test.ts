import t from 'tap';
import type { MigrationState } from '../../launcher/agent-api.js';
import { migrationOf, migrationReport } from './conditions.js';

const state = (role: MigrationState['role'], phase: MigrationState['phase'], reason = '', message = ''): MigrationState => ({
  uid: 'm-1',
  role,
  phase,
  reason,
  message,
});

t.test("a launcher's migration state is its pod's condition, prefixed with the migration's uid", async (t) => {
  const rows: Array<[MigrationState | undefined, boolean]> = [
    [undefined, false],
    [state('Source', 'Running'), false],
    [state('Source', 'Migrated'), true],
    [state('Source', 'Failed', 'MigrationFailed', 'destination libvirt connection lost'), false],
    [state('Source', 'Aborted', 'AbortRequested'), false],
    [state('Target', 'Prepared'), false],
    [state('Target', 'ReceivedPaused'), false],
    [state('Target', 'Resumed'), false],
    [state('Target', 'Prepared'), true],
    [state('Target', 'Failed', 'Canceled', 'the incoming migration was canceled'), true],
  ];
  t.same(
    rows.map(([s, exited]) => migrationReport(s, exited)),
    [
      undefined,
      { type: 'vkvm.io/MigrationSource', reason: 'Started', message: 'm-1: the source started' },
      { type: 'vkvm.io/MigrationSource', reason: 'Migrated', message: 'm-1: the source migrated' },
      { type: 'vkvm.io/MigrationSource', reason: 'Failed', message: 'm-1: MigrationFailed: destination libvirt connection lost' },
      { type: 'vkvm.io/MigrationSource', reason: 'Aborted', message: 'm-1: AbortRequested' },
      { type: 'vkvm.io/MigrationTarget', reason: 'Ready', message: 'm-1: the target is ready' },
      { type: 'vkvm.io/MigrationTarget', reason: 'Ready', message: 'm-1: the target is ready' },
      { type: 'vkvm.io/MigrationTarget', reason: 'Running', message: 'm-1: the target is running' },
      { type: 'vkvm.io/MigrationTarget', reason: 'Failed', message: 'm-1: the target launcher exited before the VM resumed here' },
      { type: 'vkvm.io/MigrationTarget', reason: 'Failed', message: 'm-1: Canceled: the incoming migration was canceled' },
    ],
  );
});

t.test("a source VM that ended Migrated is the commit, though its launcher's migration still says Running", async (t) => {
  const running = state('Source', 'Running');
  t.same(
    [
      migrationOf({ phase: 'Succeeded', reason: 'Migrated', migration: running })?.phase,
      migrationOf({ phase: 'Running', reason: 'Booted', migration: running })?.phase,
      migrationOf({ phase: 'Succeeded', reason: 'Migrated', migration: state('Target', 'Prepared') })?.phase,
      migrationOf(undefined),
    ],
    ['Migrated', 'Running', 'Prepared', undefined],
  );
});
