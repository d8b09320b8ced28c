import t from 'tap';
import { nextMigration, PENDING_TIMEOUT_MS, SLOT_RECHECK_MS, UNSCHEDULABLE_TIMEOUT_MS, type Migration, type Observed } from './phases.js';
import { migrationOf, vmimStatusOf } from './status.js';

const NOW = new Date('2026-11-27T12:00:00Z');
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();
const ends = { sourceNode: 'a', sourcePod: 'virt-launcher-vm-src', targetNode: 'b', targetPod: 'virt-launcher-vm-tgt' };

const bound = { name: ends.targetPod, node: 'b', phase: 'Pending', createdAt: ago(1000), deleting: false };
const running = { ...bound, phase: 'Running' };
const base: Observed = {
  now: NOW,
  deleting: false,
  vmi: { final: false, deleting: false },
  sourcePod: { name: ends.sourcePod, node: 'a' },
  slotsFree: true,
};
const at = ago(5000);
const ev = <R extends string>(reason: R, message = '') => ({ reason, at, message });

const preparing: Migration = { phase: 'PreparingTarget', ends };
const targetReady: Migration = { phase: 'TargetReady', ends, address: '10.0.0.2', abortRequested: false };
const runningM: Migration = { phase: 'Running', ends, address: '10.0.0.2', startedAt: at, abortRequested: false };

interface Row {
  name: string;
  from: Migration;
  observed: Partial<Observed>;
  to: Partial<Migration> & { phase: Migration['phase'] };
  actions?: string[];
  recheckAfterMs?: number;
}

const rows: Row[] = [
  // (none)
  {
    name: 'refused at admission',
    from: { phase: 'New' },
    observed: { refusal: 'VMI x is not live migratable' },
    to: { phase: 'Failed', reason: 'Rejected', message: 'VMI x is not live migratable' },
    actions: ['event'],
  },
  { name: 'accepted', from: { phase: 'New' }, observed: {}, to: { phase: 'Pending' }, actions: ['adopt'] },
  // any non-final
  {
    name: 'VMI gone',
    from: { phase: 'Scheduling' },
    observed: { vmi: undefined, targetPod: bound },
    to: { phase: 'Failed', reason: 'VMIGone' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'VMI final',
    from: preparing,
    observed: { vmi: { final: true, deleting: false } },
    to: { phase: 'Failed', reason: 'VMIGone', ends },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'VMI deleting',
    from: runningM,
    observed: { vmi: { final: false, deleting: true }, targetPod: running },
    to: { phase: 'Failed', reason: 'VMIGone' },
    actions: ['deleteTargetPod', 'event'],
  },
  // cancel before the source starts
  {
    name: 'deleted while Pending',
    from: { phase: 'Pending' },
    observed: { deleting: true },
    to: { phase: 'Failed', reason: 'Canceled', abortStatus: 'Succeeded' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'deleted while Scheduled',
    from: { phase: 'Scheduled' },
    observed: { deleting: true, targetPod: bound },
    to: { phase: 'Failed', reason: 'Canceled', abortStatus: 'Succeeded' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'deleted while PreparingTarget',
    from: preparing,
    observed: { deleting: true, targetPod: running },
    to: { phase: 'Failed', reason: 'Canceled', ends },
    actions: ['deleteTargetPod', 'event'],
  },
  // Pending
  { name: 'slots free', from: { phase: 'Pending' }, observed: {}, to: { phase: 'Scheduling' }, actions: ['createTargetPod'] },
  {
    name: 'no slot',
    from: { phase: 'Pending' },
    observed: { slotsFree: false },
    to: { phase: 'Pending' },
    actions: [],
    recheckAfterMs: SLOT_RECHECK_MS,
  },
  // Scheduling
  {
    name: 'target bound',
    from: { phase: 'Scheduling' },
    observed: { targetPod: bound },
    to: { phase: 'Scheduled' },
    actions: ['grantTargetNode'],
  },
  {
    name: 'target not bound yet',
    from: { phase: 'Scheduling' },
    observed: { targetPod: { ...bound, node: undefined } as never },
    to: { phase: 'Scheduling' },
    actions: [],
    recheckAfterMs: PENDING_TIMEOUT_MS - 1000,
  },
  {
    name: 'unschedulable for 300 s',
    from: { phase: 'Scheduling' },
    observed: {
      targetPod: {
        name: 'p',
        phase: 'Pending',
        createdAt: ago(400_000),
        deleting: false,
        unschedulableSince: ago(UNSCHEDULABLE_TIMEOUT_MS),
        unschedulableMessage: '0/2 nodes are available',
      },
    },
    to: { phase: 'Failed', reason: 'TargetUnschedulable' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'unschedulable for less than 300 s waits the rest',
    from: { phase: 'Scheduling' },
    observed: { targetPod: { name: 'p', phase: 'Pending', createdAt: ago(10_000), deleting: false, unschedulableSince: ago(100_000) } },
    to: { phase: 'Scheduling' },
    actions: [],
    recheckAfterMs: UNSCHEDULABLE_TIMEOUT_MS - 100_000,
  },
  {
    name: 'pending for 900 s',
    from: { phase: 'Scheduling' },
    observed: { targetPod: { name: 'p', phase: 'Pending', createdAt: ago(PENDING_TIMEOUT_MS), deleting: false } },
    to: { phase: 'Failed', reason: 'TargetUnschedulable' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'target pod gone while Scheduling',
    from: { phase: 'Scheduling' },
    observed: {},
    to: { phase: 'Failed', reason: 'TargetFailed' },
    actions: ['deleteTargetPod', 'event'],
  },
  // Scheduled
  {
    name: 'target pod running: handoff',
    from: { phase: 'Scheduled' },
    observed: { targetPod: running },
    to: { phase: 'PreparingTarget', ends },
    actions: ['grantTargetNode'],
  },
  {
    name: 'target pod held Pending on its node',
    from: { phase: 'Scheduled' },
    observed: { targetPod: bound },
    to: { phase: 'Scheduled' },
    actions: ['grantTargetNode'],
    recheckAfterMs: PENDING_TIMEOUT_MS - 1000,
  },
  {
    name: 'target pod not started in 900 s',
    from: { phase: 'Scheduled' },
    observed: { targetPod: { ...bound, createdAt: ago(PENDING_TIMEOUT_MS) } },
    to: { phase: 'Failed', reason: 'TargetUnschedulable' },
    actions: ['deleteTargetPod', 'event'],
  },
  // Scheduled…TargetReady: target failures
  {
    name: 'target pod failed',
    from: { phase: 'Scheduled' },
    observed: { targetPod: { ...bound, phase: 'Failed' } },
    to: { phase: 'Failed', reason: 'TargetFailed' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'target pod deleted',
    from: preparing,
    observed: { targetPod: { ...running, deleting: true } },
    to: { phase: 'Failed', reason: 'TargetFailed', ends },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'target agent failed',
    from: targetReady,
    observed: { targetPod: running, target: ev('Failed', 'pull failed') },
    to: { phase: 'Failed', reason: 'TargetFailed', message: 'the target node failed: pull failed' },
    actions: ['deleteTargetPod', 'event'],
  },
  // PreparingTarget
  {
    name: 'target ready',
    from: preparing,
    observed: { targetPod: running, target: ev('Ready'), targetNode: { ready: true, address: '10.0.0.2' } },
    to: { phase: 'TargetReady', address: '10.0.0.2', abortRequested: false },
    actions: [],
  },
  { name: 'target preparing', from: preparing, observed: { targetPod: running }, to: { phase: 'PreparingTarget' }, actions: [] },
  // TargetReady
  {
    name: 'source started',
    from: targetReady,
    observed: { targetPod: running, target: ev('Ready'), source: ev('Started') },
    to: { phase: 'Running', startedAt: at, abortRequested: false },
    actions: [],
  },
  {
    name: 'deleted when target ready: abort requested',
    from: targetReady,
    observed: { deleting: true, targetPod: running },
    to: { phase: 'TargetReady', abortRequested: true },
    actions: ['event'],
  },
  {
    name: 'source failed before starting',
    from: targetReady,
    observed: { targetPod: running, source: ev('Failed', 'libvirt: no route') },
    to: { phase: 'Failed', reason: 'SourceFailed', message: 'libvirt: no route' },
    actions: ['deleteTargetPod', 'event'],
  },
  // Running
  {
    name: 'deleted while running: abort requested',
    from: runningM,
    observed: { deleting: true, targetPod: running },
    to: { phase: 'Running', abortRequested: true },
    actions: ['event'],
  },
  {
    name: 'source aborted after the request',
    from: { ...runningM, abortRequested: true },
    observed: { deleting: true, targetPod: running, source: ev('Aborted', 'aborted') },
    to: { phase: 'Failed', reason: 'Aborted', abortStatus: 'Succeeded' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'source failed',
    from: runningM,
    observed: { targetPod: running, source: ev('Failed', 'progress timeout') },
    to: { phase: 'Failed', reason: 'SourceFailed', message: 'progress timeout' },
    actions: ['deleteTargetPod', 'event'],
  },
  {
    name: 'target node NotReady before the commit: abort',
    from: runningM,
    observed: { targetPod: running, targetNode: { ready: false } },
    to: { phase: 'Running', abortRequested: true },
    actions: [],
  },
  {
    name: 'target pod gone before the commit: abort',
    from: runningM,
    observed: {},
    to: { phase: 'Running', abortRequested: true },
    actions: [],
  },
  {
    name: 'migrated, target not yet resumed: committed',
    from: runningM,
    observed: { targetPod: running, source: ev('Migrated'), target: ev('Ready') },
    to: { phase: 'Running', committedAt: at },
    actions: [],
  },
  {
    name: 'migrated and target running: succeeded',
    from: { ...runningM, committedAt: at },
    observed: { targetPod: running, source: ev('Migrated'), target: ev('Running') },
    to: { phase: 'Succeeded', endedAt: at },
    actions: ['moveVmi', 'event'],
  },
  {
    name: 'deleted after the commit: succeeded, abort failed',
    from: { ...runningM, abortRequested: true },
    observed: { deleting: true, targetPod: running, source: ev('Migrated'), target: ev('Running') },
    to: { phase: 'Succeeded', abortStatus: 'Failed' },
    actions: ['moveVmi', 'event'],
  },
  {
    name: 'migrated, then the target failed: node lost',
    from: { ...runningM, committedAt: at },
    observed: { targetPod: running, source: ev('Migrated'), target: ev('Failed', 'killed') },
    to: { phase: 'Succeeded', vmiLost: true },
    actions: ['moveVmi', 'event'],
  },
  {
    name: 'committed, VMI deleted meanwhile: not failed',
    from: { ...runningM, committedAt: at },
    observed: { vmi: undefined, targetPod: running, source: ev('Migrated') },
    to: { phase: 'Running', committedAt: at },
    actions: [],
  },
  // final
  {
    name: 'Succeeded releases the finalizer',
    from: { phase: 'Succeeded', ends, address: 'x', endedAt: at },
    observed: { deleting: true },
    to: { phase: 'Succeeded' },
    actions: ['releaseFinalizer'],
  },
  {
    name: 'Failed releases the finalizer',
    from: { phase: 'Failed', reason: 'Canceled', message: '' },
    observed: {},
    to: { phase: 'Failed' },
    actions: ['releaseFinalizer'],
  },
];

t.test('every row of the transition table', async (t) => {
  for (const row of rows) {
    const d = nextMigration(row.from, { ...base, ...row.observed });
    t.match(
      { next: d.next, actions: d.actions.map((a) => a.kind), recheckAfterMs: d.recheckAfterMs },
      { next: row.to, ...(row.actions ? { actions: row.actions } : {}), recheckAfterMs: row.recheckAfterMs },
      row.name,
    );
    if (row.actions) t.equal(d.actions.length, row.actions.length, `${row.name}: no other action`);
  }
});

t.test('a report from an earlier migration of the same VMI is not evidence', async (t) => {
  const { sourceReport } = await import('./evidence.js');
  const pod = {
    status: { conditions: [{ type: 'vkvm.io/MigrationSource', status: 'True', reason: 'Migrated', message: 'old-uid: done' }] },
  };
  t.same([sourceReport(pod, 'new-uid'), sourceReport(pod, 'old-uid')?.reason], [undefined, 'Migrated']);
});

t.test('the status round-trips every state, so a restarted controller resumes where it was', async (t) => {
  const states: Migration[] = [
    { phase: 'New' },
    { phase: 'Pending' },
    { phase: 'Scheduling' },
    { phase: 'Scheduled' },
    preparing,
    { ...targetReady, abortRequested: true },
    { ...runningM, committedAt: at },
    { phase: 'Succeeded', ends, address: '10.0.0.2', startedAt: at, endedAt: at, abortStatus: 'Failed' },
    { phase: 'Failed', reason: 'TargetUnschedulable', message: 'no node: 0/2: x', abortStatus: 'Succeeded' },
  ];
  for (const m of states) t.same(migrationOf(vmimStatusOf(m, undefined, 'u1', undefined, NOW)), m, m.phase);
});

t.test('phase transitions are stamped once, and the VMI copy starts at the handoff', async (t) => {
  const s1 = vmimStatusOf(
    { phase: 'Scheduled' },
    { phase: 'Scheduling', phaseTransitionTimestamps: [{ phase: 'Scheduling', phaseTransitionTimestamp: ago(9) }] },
    'u1',
    undefined,
    NOW,
  );
  const s2 = vmimStatusOf({ phase: 'Scheduled' }, s1, 'u1', undefined, new Date(NOW.getTime() + 1000));
  t.same(
    s2.phaseTransitionTimestamps?.map((p) => p.phase),
    ['Scheduling', 'Scheduled'],
  );
  t.equal(s1.migrationState, undefined, 'no migrationState before the handoff');
  const s3 = vmimStatusOf(preparing, s2, 'u1', { configuration: { progressTimeout: 150 } }, NOW);
  t.same(s3.migrationState, { migrationUid: 'u1', ...ends, migrationConfiguration: { progressTimeout: 150 } });
});
