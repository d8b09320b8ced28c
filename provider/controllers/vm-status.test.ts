import t from 'tap';
import {
  derivePrintableStatus,
  deriveVmStatus,
  desiredVmi,
  nextStartFailure,
  restartsAfterDelete,
  runStrategyOf,
  startBackoffRemainingMs,
  startBackoffS,
  type VmStatusInput,
} from './vm-status.js';
import type { RunStrategy, VirtualMachine, VirtualMachineInstance, VirtualMachineStatus, VmiPhase } from '../kubevirt/types.js';

const now = new Date('2026-11-22T10:00:00Z');
const later = (s: number) => new Date(now.getTime() + s * 1000).toISOString();
const VMI_UID = 'aaaaaaaa-0000-4000-8000-000000000001';

const vm = (
  spec: Partial<VirtualMachine['spec']> = { runStrategy: 'Always' },
  status: VirtualMachineStatus = {},
  deleting = false,
): VirtualMachine => ({
  metadata: { name: 'testvm', namespace: 'default', uid: 'vm-uid', ...(deleting ? { deletionTimestamp: now.toISOString() } : {}) },
  spec: { template: { spec: { domain: {} } }, ...spec },
  status,
});
const vmi = (
  phase: VmiPhase,
  opts: { ran?: boolean; deleting?: boolean; conditions?: Array<[string, string, string?]> } = {},
): VirtualMachineInstance => ({
  metadata: { name: 'testvm', namespace: 'default', uid: VMI_UID, ...(opts.deleting ? { deletionTimestamp: now.toISOString() } : {}) },
  spec: { domain: {} },
  status: {
    phase,
    phaseTransitionTimestamps: opts.ran ? [{ phase: 'Running', phaseTransitionTimestamp: now.toISOString() }] : [],
    conditions: (opts.conditions ?? []).map(([type, status, reason]) => ({
      type,
      status: status as 'True' | 'False',
      ...(reason ? { reason } : {}),
    })),
  },
});
const always = (status: VirtualMachineStatus = {}) => vm({ runStrategy: 'Always' }, status);
const failedOnce = { startFailure: { consecutiveFailCount: 1, lastFailedVMIUID: VMI_UID, retryAfterTimestamp: later(12) } };

t.test('printableStatus: the ordered table, first match wins', async (t) => {
  const cases: Array<[string, VmStatusInput, string]> = [
    [
      'a VM being deleted is Terminating, whatever its VMI does',
      { vm: vm({ runStrategy: 'Always' }, {}, true), vmi: vmi('Running', { ran: true }), now },
      'Terminating',
    ],
    [
      'Halted with the VMI still running is Stopping',
      { vm: vm({ runStrategy: 'Halted' }), vmi: vmi('Running', { ran: true }), now },
      'Stopping',
    ],
    ['a VMI being deleted is Stopping', { vm: always(), vmi: vmi('Running', { ran: true, deleting: true }), now }, 'Stopping'],
    [
      'a paused VMI is Paused, before Running',
      { vm: always(), vmi: vmi('Running', { ran: true, conditions: [['Paused', 'True']] }), now },
      'Paused',
    ],
    ['a running VMI is Running', { vm: always(), vmi: vmi('Running', { ran: true, conditions: [['Ready', 'True']] }), now }, 'Running'],
    [
      'a claim not found',
      { vm: always(), vmi: vmi('Pending', { conditions: [['Synchronized', 'False', 'FailedPvcNotFound']] }), now },
      'ErrorPvcNotFound',
    ],
    [
      'an unschedulable launcher pod',
      { vm: always(), vmi: vmi('Scheduling', { conditions: [['PodScheduled', 'False', 'Unschedulable']] }), now },
      'ErrorUnschedulable',
    ],
    ['an unbound claim while the VM should run', { vm: always(), now, unboundClaims: true }, 'WaitingForVolumeBinding'],
    ['an unbound claim on a Halted VM is just Stopped', { vm: vm({ runStrategy: 'Halted' }), now, unboundClaims: true }, 'Stopped'],
    [
      'an image that cannot be fetched',
      { vm: always(), vmi: vmi('Scheduled', { conditions: [['Synchronized', 'False', 'ErrImagePull']] }), now },
      'ErrImagePull',
    ],
    [
      'backing off an image fetch',
      { vm: always(), vmi: vmi('Scheduled', { conditions: [['Synchronized', 'False', 'ImagePullBackOff']] }), now },
      'ImagePullBackOff',
    ],
    ['a VMI not yet running is Starting', { vm: always(), vmi: vmi('Scheduled'), now }, 'Starting'],
    ['a VMI without a phase is Starting', { vm: always(), vmi: vmi(''), now }, 'Starting'],
    ['no VMI yet, about to be created, is Starting', { vm: always(), now }, 'Starting'],
    ['a start failure waiting out its back-off is CrashLoopBackOff', { vm: always(failedOnce), now }, 'CrashLoopBackOff'],
    [
      'the failed VMI itself, not yet deleted, is CrashLoopBackOff',
      { vm: always(failedOnce), vmi: vmi('Failed'), now },
      'CrashLoopBackOff',
    ],
    ['back-off over: Starting again', { vm: always(failedOnce), now: new Date(now.getTime() + 13_000) }, 'Starting'],
    ['Manual with a start failure is not a crash loop', { vm: vm({ runStrategy: 'Manual' }, failedOnce), now }, 'Stopped'],
    ['Halted without a VMI is Stopped', { vm: vm({ runStrategy: 'Halted' }), now }, 'Stopped'],
    [
      'a VMI that powered off under Once is Stopped',
      { vm: vm({ runStrategy: 'Once' }), vmi: vmi('Succeeded', { ran: true }), now },
      'Stopped',
    ],
    ['a VMI in phase Unknown falls through to Unknown', { vm: always(), vmi: vmi('Unknown', { ran: true }), now }, 'Unknown'],
    [
      'the controller’s own expectations override the defaults',
      { vm: vm({ runStrategy: 'Halted' }), now, startExpected: true },
      'Starting',
    ],
  ];
  for (const [name, input, want] of cases) t.equal(derivePrintableStatus(input), want, name);
});

t.test('created, ready and runStrategy', async (t) => {
  t.same(deriveVmStatus({ vm: vm({ running: true }), vmi: vmi('Running', { ran: true, conditions: [['Ready', 'True']] }), now }), {
    printableStatus: 'Running',
    created: true,
    ready: true,
    runStrategy: 'Always',
  });
  t.same(deriveVmStatus({ vm: vm({ running: false }), now }), {
    printableStatus: 'Stopped',
    created: false,
    ready: false,
    runStrategy: 'Halted',
  });
});

t.test('runStrategy, and the deprecated running', async (t) => {
  const strategies = [
    vm({ running: true }),
    vm({ running: false }),
    vm({}),
    vm({ runStrategy: 'RerunOnFailure' }),
    vm({ running: true, runStrategy: 'Always' }),
    vm({ runStrategy: 'Sometimes' as RunStrategy }),
  ].map(runStrategyOf);
  t.same(strategies, ['Always', 'Halted', 'Halted', 'RerunOnFailure', undefined, undefined]);
  t.equal(desiredVmi(vm({ running: true, runStrategy: 'Always' }), undefined, now), 'keep', 'an invalid VM does nothing');
});

t.test('desiredVmi per runStrategy', async (t) => {
  const stop = { stateChangeRequests: [{ action: 'Stop' as const, uid: VMI_UID }] };
  const start = { stateChangeRequests: [{ action: 'Start' as const }] };
  const cases: Array<[string, VirtualMachine, VirtualMachineInstance | undefined, string]> = [
    ['Always, no VMI: create', always(), undefined, 'create'],
    ['Always, running: keep', always(), vmi('Running', { ran: true }), 'keep'],
    ['Always, VMI ended: delete, to start a new one', always(), vmi('Succeeded', { ran: true }), 'delete'],
    ['Always, stop request (virtctl restart): delete', always(stop), vmi('Running', { ran: true }), 'delete'],
    ['Always, VMI already being deleted: keep', always(), vmi('Failed', { deleting: true }), 'keep'],
    ['Always, in start back-off: keep', always(failedOnce), undefined, 'keep'],
    ['Halted, running: delete', vm({ runStrategy: 'Halted' }), vmi('Running', { ran: true }), 'delete'],
    ['Halted, none: keep', vm({ runStrategy: 'Halted' }), undefined, 'keep'],
    ['running: false is Halted', vm({ running: false }), vmi('Running', { ran: true }), 'delete'],
    ['running: true is Always', vm({ running: true }), undefined, 'create'],
    ['Manual, none: keep', vm({ runStrategy: 'Manual' }), undefined, 'keep'],
    ['Manual, start request: create', vm({ runStrategy: 'Manual' }, start), undefined, 'create'],
    ['Manual, VMI ended: keep', vm({ runStrategy: 'Manual' }), vmi('Failed', { ran: true }), 'keep'],
    ['Manual, stop request: delete', vm({ runStrategy: 'Manual' }, stop), vmi('Running', { ran: true }), 'delete'],
    ['Manual ignores the back-off', vm({ runStrategy: 'Manual' }, { ...failedOnce, ...start }), undefined, 'create'],
    ['RerunOnFailure, first start: create', vm({ runStrategy: 'RerunOnFailure' }), undefined, 'create'],
    [
      'RerunOnFailure, failed: delete',
      vm({ runStrategy: 'RerunOnFailure' }, { runStrategy: 'RerunOnFailure' }),
      vmi('Failed', { ran: true }),
      'delete',
    ],
    [
      'RerunOnFailure, succeeded: delete',
      vm({ runStrategy: 'RerunOnFailure' }, { runStrategy: 'RerunOnFailure' }),
      vmi('Succeeded', { ran: true }),
      'delete',
    ],
    [
      'RerunOnFailure, gone after success: keep',
      vm({ runStrategy: 'RerunOnFailure' }, { runStrategy: 'RerunOnFailure' }),
      undefined,
      'keep',
    ],
    [
      'RerunOnFailure, gone after failure (start request): create',
      vm({ runStrategy: 'RerunOnFailure' }, { runStrategy: 'RerunOnFailure', ...start }),
      undefined,
      'create',
    ],
    ['RerunOnFailure, switched from Halted: create', vm({ runStrategy: 'RerunOnFailure' }, { runStrategy: 'Halted' }), undefined, 'create'],
    ['Once, none: create', vm({ runStrategy: 'Once' }), undefined, 'create'],
    ['Once, ended: keep', vm({ runStrategy: 'Once' }), vmi('Failed', { ran: true }), 'keep'],
    ['a VM being deleted deletes its VMI', vm({ runStrategy: 'Always' }, {}, true), vmi('Running', { ran: true }), 'delete'],
    ['a VM being deleted never creates', vm({ runStrategy: 'Always' }, {}, true), undefined, 'keep'],
  ];
  for (const [name, v, i, want] of cases) t.equal(desiredVmi(v, i, now), want, name);
  t.same(
    [vmi('Failed', { ran: true }), vmi('Succeeded', { ran: true })].map((i) =>
      restartsAfterDelete(vm({ runStrategy: 'RerunOnFailure' }), i),
    ),
    [true, false],
    'RerunOnFailure asks for a Start request when it deletes a failed VMI only',
  );
});

t.test("start back-off: KubeVirt's 10 s × failures², with jitter up to half, capped at 5 min", async (t) => {
  t.same(
    [
      [1, 0],
      [1, 0.999],
      [2, 0],
      [2, 0.5],
      [3, 0],
      [4, 0],
      [5, 0],
      [6, 0],
      [5, 0.99],
      [0, 0],
    ].map(([n, j]) => startBackoffS(n!, j!)),
    [10, 15, 40, 50, 90, 160, 250, 300, 300, 10],
  );
  t.equal(startBackoffRemainingMs(always(failedOnce), now), 12_000);
  t.equal(startBackoffRemainingMs(always(failedOnce), new Date(now.getTime() + 60_000)), 0);
});

t.test('startFailure: counted once per VMI that never ran, cleared by one that did', async (t) => {
  const failed = vmi('Failed');
  t.same(nextStartFailure(always(), failed, now, 0), {
    consecutiveFailCount: 1,
    lastFailedVMIUID: VMI_UID,
    retryAfterTimestamp: later(10),
  });
  const second = { ...failed, metadata: { ...failed.metadata, uid: 'aaaaaaaa-0000-4000-8000-000000000002' } };
  t.same(nextStartFailure(always(failedOnce), second, now, 0), {
    consecutiveFailCount: 2,
    lastFailedVMIUID: 'aaaaaaaa-0000-4000-8000-000000000002',
    retryAfterTimestamp: later(40),
  });
  t.same(nextStartFailure(always(failedOnce), failed, now, 0), failedOnce.startFailure, 'the same VMI is not counted twice');
  t.same(nextStartFailure(always(failedOnce), vmi('Scheduled'), now, 0), failedOnce.startFailure, 'a VMI still starting changes nothing');
  t.equal(nextStartFailure(always(failedOnce), vmi('Failed', { ran: true }), now, 0), undefined, 'a VMI that ran resets the count');
  t.equal(
    nextStartFailure(vm({ runStrategy: 'Manual' }, failedOnce), failed, now, 0),
    undefined,
    'strategies that never restart keep no count',
  );
});
