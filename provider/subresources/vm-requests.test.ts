import t from 'tap';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineStatus, VmiPhase } from '../kubevirt/types.js';
import { StatusError } from './errors.js';
import { changeRequestOps, checkRestartOptions, restartChange, startChange, stopChange, type VmChange } from './vm-requests.js';

const vm = (spec: Partial<VirtualMachine['spec']>, status: VirtualMachineStatus = { printableStatus: 'Stopped' }): VirtualMachine => ({
  metadata: { name: 'testvm', namespace: 'ns', uid: 'vm-uid' },
  spec: { template: { spec: { domain: {} } }, ...spec },
  status,
});
const vmi = (phase: VmiPhase, terminationGracePeriodSeconds?: number): VirtualMachineInstance => ({
  metadata: { name: 'testvm', namespace: 'ns', uid: 'vmi-uid' },
  spec: { domain: {}, ...(terminationGracePeriodSeconds !== undefined ? { terminationGracePeriodSeconds } : {}) },
  status: { phase },
});

/** The change, or the Status code and message it is refused with. */
const outcome = (f: () => VmChange): VmChange | { code: number; message: string } => {
  try {
    return f();
  } catch (err) {
    if (err instanceof StatusError) return { code: err.code, message: err.message };
    throw err;
  }
};
const conflict = (why: string) => ({ code: 409, message: `Operation cannot be fulfilled on virtualmachine.kubevirt.io "testvm": ${why}` });
const requests = (changes: object[]) => ({ kind: 'status', ops: [{ op: 'add', path: '/status/stateChangeRequests', value: changes }] });

t.test('start follows KubeVirt per run strategy', async (t) => {
  const cases: Array<[string, () => VmChange, unknown]> = [
    [
      'Halted: runStrategy Always',
      () => startChange(vm({ runStrategy: 'Halted' }), undefined, {}),
      { kind: 'spec', patch: { spec: { runStrategy: 'Always' } } },
    ],
    [
      'running false: running true',
      () => startChange(vm({ running: false }), undefined, {}),
      { kind: 'spec', patch: { spec: { running: true } } },
    ],
    [
      'Halted, paused: a Start request with data',
      () => startChange(vm({ runStrategy: 'Halted' }), undefined, { paused: true }),
      requests([{ action: 'Start', data: { paused: 'true' } }]),
    ],
    ['Manual: a Start request', () => startChange(vm({ runStrategy: 'Manual' }), undefined, {}), requests([{ action: 'Start' }])],
    [
      'Manual after an ended VMI: Stop it, then Start',
      () => startChange(vm({ runStrategy: 'Manual' }), vmi('Succeeded'), {}),
      requests([{ action: 'Stop', uid: 'vmi-uid' }, { action: 'Start' }]),
    ],
    ['a running VMI', () => startChange(vm({ runStrategy: 'Manual' }), vmi('Running'), {}), conflict('VM is already running')],
    ['Always', () => startChange(vm({ runStrategy: 'Always' }), undefined, {}), conflict('Always does not support manual start requests')],
    [
      'RerunOnFailure after a failure',
      () => startChange(vm({ runStrategy: 'RerunOnFailure' }), vmi('Failed'), {}),
      conflict('RerunOnFailure does not support starting VM from failed state'),
    ],
  ];
  for (const [name, f, want] of cases) t.same(outcome(f), want, name);
});

t.test('stop and restart follow KubeVirt per run strategy', async (t) => {
  const cases: Array<[string, () => VmChange, unknown]> = [
    [
      'Always: runStrategy Halted',
      () => stopChange(vm({ runStrategy: 'Always' }), vmi('Running'), {}),
      { kind: 'spec', patch: { spec: { runStrategy: 'Halted' } } },
    ],
    [
      'Manual: a Stop request for the VMI',
      () => stopChange(vm({ runStrategy: 'Manual' }), vmi('Running'), {}),
      requests([{ action: 'Stop', uid: 'vmi-uid' }]),
    ],
    ['Manual, nothing running', () => stopChange(vm({ runStrategy: 'Manual' }), undefined, {}), conflict('VM is not running')],
    ['Halted, nothing running', () => stopChange(vm({ runStrategy: 'Halted' }), undefined, {}), conflict('VM is not running')],
    [
      'Halted, still stopping, no shorter grace period',
      () => stopChange(vm({ runStrategy: 'Halted' }), vmi('Running', 30), { gracePeriod: 30 }),
      conflict('Halted only supports manual stop requests with a shorter graceperiod'),
    ],
    [
      'Halted, still stopping, a shorter grace period',
      () => stopChange(vm({ runStrategy: 'Halted' }), vmi('Running', 30), { gracePeriod: 0 }),
      requests([{ action: 'Stop', uid: 'vmi-uid' }]),
    ],
    [
      'restart: Stop the VMI, then Start',
      () => restartChange(vm({ runStrategy: 'Always' }), vmi('Running')),
      requests([{ action: 'Stop', uid: 'vmi-uid' }, { action: 'Start' }]),
    ],
    [
      'restart, Halted',
      () => restartChange(vm({ runStrategy: 'Halted' }), undefined),
      conflict('RunStategy Halted does not support manual restart requests'),
    ],
    ['restart, no VMI', () => restartChange(vm({ runStrategy: 'Manual' }), undefined), conflict('VM is not running: Halted')],
  ];
  for (const [name, f, want] of cases) t.same(outcome(f), want, name);
  t.throws(
    () => checkRestartOptions({ gracePeriodSeconds: 5 }),
    { code: 400, message: 'For force restart, only gracePeriod=0 is supported for now' },
    'only a forced restart names a grace period',
  );
});

t.test('state-change requests: added, a Stop replaces pending ones under a test, others are refused', async (t) => {
  t.same(
    changeRequestOps(vm({}, {}), [{ action: 'Start' }]),
    [{ op: 'add', path: '/status', value: { stateChangeRequests: [{ action: 'Start' }] } }],
    'no status yet',
  );
  const pending = vm({}, { stateChangeRequests: [{ action: 'Start' }], startFailure: { consecutiveFailCount: 1 } });
  t.same(
    changeRequestOps(pending, [{ action: 'Stop', uid: 'u' }]),
    [
      { op: 'test', path: '/status/stateChangeRequests', value: [{ action: 'Start' }] },
      { op: 'replace', path: '/status/stateChangeRequests', value: [{ action: 'Stop', uid: 'u' }] },
      { op: 'remove', path: '/status/startFailure' },
    ],
    'a Stop replaces; the start failure is cleared',
  );
  t.throws(
    () => changeRequestOps(pending, [{ action: 'Start' }]),
    { code: 500, message: /stop\/start already underway/ },
    'a Start while one is pending',
  );
});
