import t from 'tap';
import {
  controlledBy,
  firmwareUuid,
  nextStateChangeRequests,
  nextVmStatus,
  restartRequired,
  TEMPLATE_HASH_ANNOTATION,
  templateHash,
  vmiFromTemplate,
} from './vm-sync.js';
import { statusPatch } from '../kube/status-patch.js';
import { setCondition } from '../kubevirt/conditions.js';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineStatus, VmiPhase } from '../kubevirt/types.js';

const now = new Date('2026-11-22T10:00:00Z');
const vm = (spec: Partial<VirtualMachine['spec']> = { runStrategy: 'Always' }, status: VirtualMachineStatus = {}): VirtualMachine => ({
  metadata: { name: 'testvm', namespace: 'ns', uid: 'vm-uid' },
  spec: {
    template: {
      metadata: { labels: { app: 'web' }, annotations: { note: 'x' } },
      spec: { domain: { resources: { requests: { memory: '64Mi' } } } },
    },
    ...spec,
  },
  status,
});
const vmi = (phase: VmiPhase, ready = false): VirtualMachineInstance => ({
  metadata: {
    name: 'testvm',
    namespace: 'ns',
    uid: 'vmi-uid',
    ownerReferences: [{ apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: 'testvm', uid: 'vm-uid', controller: true }],
  },
  spec: { domain: {} },
  status: { phase, conditions: ready ? [{ type: 'Ready', status: 'True' }] : [] },
});

t.test('the VMI from the template is named after the VM and controlled by it', async (t) => {
  const made = vmiFromTemplate(vm());
  t.same(made, {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstance',
    metadata: {
      name: 'testvm',
      namespace: 'ns',
      labels: { app: 'web', 'kubevirt.io/vm': 'testvm' },
      annotations: { note: 'x', 'vkvm.io/vm-template-hash': templateHash(vm()) },
      ownerReferences: [
        { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: 'testvm', uid: 'vm-uid', controller: true, blockOwnerDeletion: true },
      ],
    },
    spec: { domain: { resources: { requests: { memory: '64Mi' } }, firmware: { uuid: firmwareUuid('testvm') } } },
  });
  t.ok(controlledBy(vmi('Running'), vm()));
  t.notOk(
    controlledBy({ ...vmi('Running'), metadata: { name: 'testvm', uid: 'x' } }, vm()),
    'a VMI without a controller ref is not the VM’s',
  );
  const own = vm();
  own.spec.template.spec.domain.firmware = { uuid: 'fixed' };
  t.equal(vmiFromTemplate(own).spec.domain.firmware?.uuid, 'fixed', 'a template UUID is kept');
  t.same(vm().spec.template.spec.domain, { resources: { requests: { memory: '64Mi' } } }, 'the VM is not modified');
});

t.test('firmware UUIDs are KubeVirt’s name-based v5 UUIDs', async (t) => {
  t.match(firmwareUuid('testvm'), /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  t.equal(firmwareUuid('testvm'), firmwareUuid('testvm'), 'stable');
  t.not(firmwareUuid('testvm'), firmwareUuid('other'));
});

t.test('state-change requests: added on a RerunOnFailure delete, consumed by create and by the stopped VMI going', async (t) => {
  const rerun = vm({ runStrategy: 'RerunOnFailure' });
  t.same(
    nextStateChangeRequests(rerun, vmi('Failed'), 'delete', { ok: true }),
    [{ action: 'Start' }],
    'a failed RerunOnFailure VMI restarts',
  );
  t.equal(nextStateChangeRequests(rerun, vmi('Succeeded'), 'delete', { ok: true }), undefined, 'a succeeded one does not');
  t.equal(
    nextStateChangeRequests(vm({ runStrategy: 'Manual' }, { stateChangeRequests: [{ action: 'Start' }] }), undefined, 'create', {
      ok: true,
    }),
    undefined,
    'create consumes Start',
  );
  t.same(
    nextStateChangeRequests(vm({ runStrategy: 'Manual' }, { stateChangeRequests: [{ action: 'Start' }] }), undefined, 'create', {
      ok: false,
      reason: 'FailedCreate',
      message: 'm',
    }),
    [{ action: 'Start' }],
    'a failed create keeps it',
  );
  const stopping = vm({ runStrategy: 'Always' }, { stateChangeRequests: [{ action: 'Stop', uid: 'vmi-uid' }, { action: 'Start' }] });
  t.same(
    nextStateChangeRequests(stopping, vmi('Running'), 'delete', { ok: true }),
    [{ action: 'Stop', uid: 'vmi-uid' }, { action: 'Start' }],
    'Stop stays while its VMI goes',
  );
  t.same(nextStateChangeRequests(stopping, undefined, 'keep', { ok: true }), [{ action: 'Start' }], 'and is dropped once it is gone');
  t.equal(
    nextStateChangeRequests(stopping, undefined, 'create', { ok: true }),
    undefined,
    'a restart served in one sync (old VMI gone, new one created) leaves no Start behind for a later stop to trip over',
  );
});

t.test('VM status after a sync', async (t) => {
  t.match(
    nextVmStatus({ vm: vm(), action: 'create', outcome: { ok: true }, now, jitter: 0 }),
    {
      printableStatus: 'Starting',
      created: true,
      ready: false,
      runStrategy: 'Always',
      conditions: [{ type: 'Ready', status: 'False', reason: 'VMINotExists' }],
    },
    'just created: Starting',
  );
  t.match(
    nextVmStatus({ vm: vm(), vmi: vmi('Running', true), action: 'keep', outcome: { ok: true }, now, jitter: 0 }),
    { printableStatus: 'Running', created: true, ready: true, conditions: [{ type: 'Ready', status: 'True' }] },
    'running and ready',
  );
  t.match(
    nextVmStatus({ vm: vm({ runStrategy: 'Halted' }), vmi: vmi('Running'), action: 'delete', outcome: { ok: true }, now, jitter: 0 }),
    { printableStatus: 'Stopping', created: true },
    'halting',
  );
  t.match(
    nextVmStatus({ vm: vm({ runStrategy: 'Halted' }), action: 'keep', outcome: { ok: true }, now, jitter: 0 }),
    { printableStatus: 'Stopped', created: false, ready: false, runStrategy: 'Halted' },
    'halted',
  );
  const failed = nextVmStatus({
    vm: vm(),
    action: 'create',
    outcome: { ok: false, reason: 'FailedCreate', message: 'denied' },
    now,
    jitter: 0,
  });
  t.match(
    failed.conditions,
    [{ type: 'Ready' }, { type: 'Failure', status: 'True', reason: 'FailedCreate', message: 'denied' }],
    'a failed create shows as Failure',
  );
  const recovered = nextVmStatus({ vm: vm({ runStrategy: 'Always' }, failed), action: 'create', outcome: { ok: true }, now, jitter: 0 });
  t.notOk(
    recovered.conditions?.some((c) => c.type === 'Failure'),
    'and clears once create works',
  );

  const crashed = nextVmStatus({ vm: vm(), vmi: vmi('Failed'), action: 'delete', outcome: { ok: true }, now, jitter: 0 });
  t.match(
    crashed.startFailure,
    { consecutiveFailCount: 1, lastFailedVMIUID: 'vmi-uid', retryAfterTimestamp: new Date(now.getTime() + 10_000).toISOString() },
    'a VMI that never ran counts a start failure',
  );
  const backingOff = nextVmStatus({ vm: vm({ runStrategy: 'Always' }, crashed), action: 'keep', outcome: { ok: true }, now, jitter: 0 });
  t.equal(backingOff.printableStatus, 'CrashLoopBackOff', 'waiting to restart');
});

t.test('status patches carry changed owned fields only, null to remove', async (t) => {
  const current: VirtualMachineStatus = {
    printableStatus: 'Running',
    ready: true,
    startFailure: { consecutiveFailCount: 1 },
    conditions: setCondition([], { type: 'Ready', status: 'True' }, now),
  };
  t.equal(
    statusPatch(current, { ...current }, ['printableStatus', 'ready', 'startFailure', 'conditions']),
    undefined,
    'unchanged: no write',
  );
  t.same(
    statusPatch(current, { printableStatus: 'Stopped', ready: true, conditions: current.conditions! }, [
      'printableStatus',
      'ready',
      'startFailure',
      'conditions',
    ]),
    { printableStatus: 'Stopped', startFailure: null },
  );
  t.equal(statusPatch({ ...current, runStrategy: 'Always' }, current, ['printableStatus']), undefined, 'fields not owned are ignored');
});

t.test('a condition keeps its transition time while its status holds', async (t) => {
  const first = setCondition([], { type: 'Ready', status: 'False', reason: 'A' }, now);
  const later = new Date(now.getTime() + 5000);
  t.same(setCondition(first, { type: 'Ready', status: 'False', reason: 'B' }, later)[0]?.lastTransitionTime, now.toISOString());
  t.same(setCondition(first, { type: 'Ready', status: 'True' }, later), [
    { type: 'Ready', status: 'True', lastProbeTime: null, lastTransitionTime: later.toISOString() },
  ]);
});

t.test('VM fields vkvm keeps but does not realize are reported by an UnsupportedFields condition', async (t) => {
  const withInstancetype = vm({ runStrategy: 'Always', ...({ instancetype: { name: 'u1.small' }, liveUpdateFeatures: {} } as object) });
  const s = nextVmStatus({ vm: withInstancetype, action: 'keep', outcome: { ok: true }, now, jitter: 0 });
  t.match(
    s.conditions?.find((c) => c.type === 'UnsupportedFields'),
    { status: 'True', reason: 'Ignored', message: 'vkvm does not realize: spec.liveUpdateFeatures' },
    'each unsupported VM field is named by its path; spec.instancetype is realized (expanded into the VMI), not reported',
  );
  const plain = nextVmStatus({ vm: { ...vm(), status: s }, action: 'keep', outcome: { ok: true }, now, jitter: 0 });
  t.notOk(
    plain.conditions?.some((c) => c.type === 'UnsupportedFields'),
    'the condition goes with the fields',
  );
});

t.test('RestartRequired: a running VM whose template spec changed since its VMI was made, until the next VMI', async (t) => {
  const running = (v: ReturnType<typeof vm>) => ({ ...vmiFromTemplate(v), status: { phase: 'Running' as const } });
  const before = vm();
  const changed = vm();
  changed.spec.template.spec.domain.resources = { requests: { memory: '128Mi' } };
  const relabelled = vm();
  relabelled.spec.template.metadata = { labels: { app: 'other' } };
  const oldVmi = running(before);
  delete oldVmi.metadata.annotations![TEMPLATE_HASH_ANNOTATION];
  t.same(
    {
      unchanged: restartRequired(before, running(before)),
      specChanged: restartRequired(changed, running(before)),
      labelsOnly: restartRequired(relabelled, running(before)),
      restarted: restartRequired(changed, running(changed)),
      stopped: restartRequired(changed, undefined),
      finished: restartRequired(changed, { ...running(before), status: { phase: 'Succeeded' } }),
      madeBeforeTheHash: restartRequired(changed, oldVmi),
    },
    {
      unchanged: false,
      specChanged: true,
      labelsOnly: false,
      restarted: false,
      stopped: false,
      finished: false,
      madeBeforeTheHash: false,
    },
  );
  const [a, b] = [vm(), vm()];
  a.spec.template.spec = { domain: { cpu: { cores: 1 }, resources: {} }, terminationGracePeriodSeconds: 0 };
  b.spec.template.spec = { terminationGracePeriodSeconds: 0, domain: { resources: {}, cpu: { cores: 1 } } };
  t.equal(templateHash(a), templateHash(b), 'the same spec with its fields in another order hashes the same');
  const status = nextVmStatus({ vm: changed, vmi: running(before), action: 'keep', outcome: { ok: true }, now: new Date(0), jitter: 0 });
  t.match(
    status.conditions?.find((c) => c.type === 'RestartRequired'),
    {
      status: 'True',
      message: 'a non-live-updatable field was changed in the template spec',
    },
  );
  const cleared = nextVmStatus({
    vm: { ...changed, status },
    vmi: running(changed),
    action: 'keep',
    outcome: { ok: true },
    now: new Date(0),
    jitter: 0,
  });
  t.notOk(
    cleared.conditions?.some((c) => c.type === 'RestartRequired'),
    'cleared once the VMI runs the template as it is',
  );
});
