import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import type { LauncherView } from '../launchers/registry.js';
import { newLifecycle, transition, type LifecycleEvent, type PodLifecycle } from './lifecycle.js';
import { PodMigrations } from './pod-migrations.js';
import { INCOMING_RECHECK_MS, incomingRecheckMs, nextIncomingStep, type IncomingLauncher } from './incoming-step.js';

const pod = (labels: Record<string, string>): V1Pod => ({
  metadata: {
    name: 'tgt',
    namespace: 'ns',
    uid: 'u1',
    labels,
    ownerReferences: [{ kind: 'VirtualMachineInstance', name: 'vm', uid: 'v', apiVersion: 'kubevirt.io/v1', controller: true }],
  },
  spec: { nodeName: 'b', containers: [{ name: 'compute' }] },
});
const target = pod({ 'kubevirt.io/migrationJobUID': 'm-1' });
const live = (phase?: string): LauncherView<unknown> =>
  ({
    uid: 'u1',
    dir: '/vms/u1',
    live: true,
    client: {},
    pid: 1,
    state: { phase: 'Pending', ...(phase ? { migration: { uid: 'm-1', role: 'Target', phase } } : {}) },
  }) as unknown as LauncherView<unknown>;

function env(initialState?: object) {
  let lc: PodLifecycle = newLifecycle(target);
  let view: LauncherView<unknown> | undefined;
  let migrationState = initialState;
  const calls: string[] = [];
  const rechecks: Array<[string, number]> = [];
  const m = new PodMigrations({
    target: {
      prepare: async () => (calls.push('prepare'), (view = live('Prepared')), { type: 'prepared' as const }),
      finish: async () => void calls.push('finish'),
      cancel: async () => void calls.push('cancel'),
      forget: () => void calls.push('forget'),
    },
    source: { sync: async () => void calls.push('source'), forget: () => undefined },
    launchers: { get: () => view },
    vmis: { read: async () => ({ metadata: { name: 'vm' }, spec: { domain: {} }, status: { migrationState } }) as never },
    lifecycle: () => lc,
    apply: (_p: V1Pod, e: LifecycleEvent) => (lc = transition(lc, e, 0)),
    learnt: () => undefined,
    syncAfter: (key, ms) => void rechecks.push([key, ms]),
  });
  const setState = (s: object) => (migrationState = s);
  return { m, calls, rechecks, lc: () => lc, setView: (v: LauncherView<unknown> | undefined) => (view = v), setState };
}

t.test(
  'a target pod is prepared once, resumed when the VMI shows the commit, and a VMI pod of its own again once the VM runs',
  async (t) => {
    const e = env({ migrationUid: 'm-1', targetPod: 'tgt', endTimestamp: '2026-11-27T12:00:00Z' });
    t.equal(e.m.receiving(target), true, 'a new target pod is receiving');
    await e.m.syncIncoming(target);
    await e.m.syncIncoming(target);
    t.same([e.calls, e.lc().state], [['prepare', 'finish', 'finish'], { kind: 'Incoming', migrationUid: 'm-1', prepared: true }]);
    e.setView(live('Resumed'));
    t.equal(e.m.receiving(target), true, 'still receiving until a sync sees the VM arrived');
    await e.m.syncIncoming(target);
    t.same([e.lc().state.kind, e.m.receiving(target)], ['Running', false], 'the VM arrived: the pod syncs as any VMI pod from now on');
  },
);

t.test('no commit yet: prepared and waiting; a target whose launcher died ends, and never boots', async (t) => {
  const e = env({ migrationUid: 'm-1', targetPod: 'tgt' });
  await e.m.syncIncoming(target);
  t.same(e.calls, ['prepare'], 'nothing resumed before the commit');
  e.setView({ uid: 'u1', dir: '/vms/u1', live: false, gone: { reason: 'LauncherDied', message: 'killed' } } as never);
  await e.m.syncIncoming(target);
  t.same([e.lc().state.kind, e.m.receiving(target)], ['Finished', true], 'Finished, and still never handed to the boot path');
});

t.test("only a VMI's pod has an outgoing migration", async (t) => {
  const e = env();
  e.setView(live());
  await e.m.syncOutgoing(target);
  await e.m.syncOutgoing(pod({}));
  await e.m.syncOutgoing({ ...pod({}), metadata: { ...pod({}).metadata, ownerReferences: [] } });
  t.same(e.calls, ['source', 'source'], "a VMI's pod, a former target among them; not a pod of no VMI");
});

t.test('the next step of a receiving pod, and whether it is looked at again whatever its events', async (t) => {
  const rows: Array<[IncomingLauncher, boolean, boolean, string, number | undefined]> = [
    ['gone', true, true, 'end', undefined],
    ['resumed', true, false, 'arrived', undefined],
    ['none', true, true, 'prepare', INCOMING_RECHECK_MS],
    ['waiting', false, true, 'prepare', INCOMING_RECHECK_MS],
    ['waiting', true, true, 'resume', INCOMING_RECHECK_MS],
    ['waiting', true, false, 'wait', INCOMING_RECHECK_MS],
  ];
  t.same(
    rows.map(([launcher, prepared, committed]) => {
      const step = nextIncomingStep({ launcher, prepared, committed });
      return [launcher, prepared, committed, step.kind, incomingRecheckMs(step)];
    }),
    rows,
  );
});

t.test('a commit the target heard of neither on the stream nor by a VMI event is found by the periodic recheck', async (t) => {
  const e = env({ migrationUid: 'm-1', targetPod: 'tgt' });
  await e.m.syncIncoming(target);
  t.same([e.calls, e.rechecks], [['prepare'], [['ns/tgt', INCOMING_RECHECK_MS]]], 'prepared and waiting: looked at again soon');
  // The controllers copy the commit into the VMI; no event reaches this node. The recheck's sync finds it.
  e.setState({ migrationUid: 'm-1', targetPod: 'tgt', endTimestamp: '2026-11-28T03:15:06Z' });
  await e.m.syncIncoming(target);
  t.same(e.calls, ['prepare', 'finish'], 'the VM is resumed from the VMI');
  e.setView(live('Resumed'));
  await e.m.syncIncoming(target);
  t.same([e.lc().state.kind, e.rechecks.length], ['Running', 2], 'arrived: no more rechecks');
});

t.test('a commit of another migration, or a failed one, resumes nothing', async (t) => {
  for (const state of [
    { migrationUid: 'm-0', targetPod: 'tgt', endTimestamp: '2026-11-28T03:15:06Z' },
    { migrationUid: 'm-1', targetPod: 'other', endTimestamp: '2026-11-28T03:15:06Z' },
    { migrationUid: 'm-1', targetPod: 'tgt', endTimestamp: '2026-11-28T03:15:06Z', failed: true },
  ]) {
    const e = env(state);
    await e.m.syncIncoming(target);
    await e.m.syncIncoming(target);
    t.same(e.calls, ['prepare'], JSON.stringify(state));
  }
});
