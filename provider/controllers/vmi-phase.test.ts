import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { AGENT_GRACE_MS, needsLauncherPod, nextVmiStatus } from './vmi-phase.js';
import type { VirtualMachineInstance, VirtualMachineInstanceStatus, VmiPhase } from '../kubevirt/types.js';

const now = new Date('2026-11-22T10:00:00Z');
const at = (s: number) => new Date(now.getTime() + s * 1000).toISOString();
const vmi = (phase: VmiPhase | undefined, status: VirtualMachineInstanceStatus = {}, deleting = false): VirtualMachineInstance => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'u', ...(deleting ? { deletionTimestamp: now.toISOString() } : {}) },
  spec: { domain: {} },
  status: {
    ...(phase !== undefined ? { phase, phaseTransitionTimestamps: [{ phase, phaseTransitionTimestamp: at(-60) }] } : {}),
    ...status,
  },
});
const pod = (opts: { nodeName?: string; phase?: string; unschedulable?: string; finishedAt?: string } = {}): V1Pod => ({
  metadata: { name: 'virt-launcher-vm-abcde', namespace: 'ns' },
  spec: { containers: [], ...(opts.nodeName ? { nodeName: opts.nodeName } : {}) },
  status: {
    phase: opts.phase ?? 'Pending',
    ...(opts.unschedulable
      ? { conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: opts.unschedulable }] }
      : {}),
    ...(opts.finishedAt
      ? {
          containerStatuses: [
            {
              name: 'compute',
              image: 'i',
              imageID: '',
              ready: false,
              restartCount: 0,
              state: { terminated: { exitCode: 1, finishedAt: new Date(opts.finishedAt) } },
            },
          ],
        }
      : {}),
  },
});
const phases = (s: VirtualMachineInstanceStatus) => s.phaseTransitionTimestamps?.map((p) => p.phase);

t.test('a pod is created only for a new VMI that has none', async (t) => {
  t.ok(needsLauncherPod(vmi(undefined), undefined), 'a new VMI');
  t.ok(needsLauncherPod(vmi('Pending'), undefined), 'a Pending VMI whose create failed');
  t.notOk(needsLauncherPod(vmi(undefined), pod()), 'it has one');
  t.notOk(needsLauncherPod(vmi('Scheduling'), undefined), 'its pod was made and deleted: never a second one');
  t.notOk(needsLauncherPod(vmi(undefined, {}, true), undefined), 'being deleted');
});

t.test('phase follows the launcher pod up to Scheduled', async (t) => {
  const created = nextVmiStatus({ vmi: vmi(undefined), pod: pod(), now }).status;
  t.match(
    created,
    { phase: 'Scheduling', phaseTransitionTimestamps: [{ phase: 'Scheduling', phaseTransitionTimestamp: now.toISOString() }] },
    'pod created → Scheduling',
  );

  const failedCreate = nextVmiStatus({ vmi: vmi(undefined), createError: 'quota exceeded', now }).status;
  t.match(
    failedCreate,
    { phase: 'Pending', conditions: [{ type: 'Synchronized', status: 'False', reason: 'FailedCreate', message: 'quota exceeded' }] },
    'create failed → Pending',
  );

  const unschedulable = nextVmiStatus({ vmi: vmi('Scheduling'), pod: pod({ unschedulable: '0/1 nodes are available' }), now }).status;
  t.match(
    unschedulable,
    {
      phase: 'Scheduling',
      conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/1 nodes are available' }],
    },
    'the pod’s Unschedulable condition is copied',
  );
  t.same(phases(unschedulable), ['Scheduling'], 'no new transition when the phase stays');

  const bound = nextVmiStatus({
    vmi: vmi('Scheduling', { conditions: unschedulable.conditions! }),
    pod: pod({ nodeName: 'node1' }),
    now,
  }).status;
  t.match(
    bound,
    { phase: 'Scheduled', nodeName: 'node1', conditions: [] },
    'pod bound → Scheduled on its node, PodScheduled=False dropped',
  );
  t.same(phases(bound), ['Scheduling', 'Scheduled']);

  const retried = nextVmiStatus({ vmi: vmi('Pending', { conditions: failedCreate.conditions! }), pod: pod(), now }).status;
  t.match(retried, { phase: 'Scheduling', conditions: [] }, 'the create failure clears once a pod exists');
});

t.test('phases the node agent owns never move back', async (t) => {
  for (const phase of ['Running', 'Succeeded', 'Failed'] as const) {
    const before = vmi(phase, { nodeName: 'node1' });
    t.same(nextVmiStatus({ vmi: before, pod: pod({ nodeName: 'node1', phase: 'Running' }), now }).status, before.status, `${phase} stays`);
  }
  t.same(
    nextVmiStatus({ vmi: vmi('Scheduled'), pod: pod({ nodeName: 'n' }), now }).status,
    vmi('Scheduled').status,
    'Scheduled stays Scheduled',
  );
  const running = vmi('Running');
  t.same(nextVmiStatus({ vmi: running, now }).status, running.status, 'a Running VMI without a pod is left to the agent');
});

t.test('a terminated or vanished launcher pod fails the VMI', async (t) => {
  t.match(
    nextVmiStatus({ vmi: vmi('Scheduled'), pod: pod({ nodeName: 'n', phase: 'Failed' }), now }),
    { status: { phase: 'Failed', reason: 'LauncherPodFailed' } },
    'pod Failed before Running',
  );
  t.match(
    nextVmiStatus({ vmi: vmi('Scheduling'), pod: pod({ phase: 'Succeeded' }), now }),
    { status: { phase: 'Failed', reason: 'LauncherPodSucceeded' } },
    'pod Succeeded before Running',
  );
  t.match(
    nextVmiStatus({ vmi: vmi('Scheduled'), now }),
    { status: { phase: 'Failed', reason: 'LauncherPodDeleted' } },
    'pod deleted after scheduling',
  );
  t.match(
    nextVmiStatus({ vmi: vmi('Scheduling'), now }),
    { status: { phase: 'Failed', reason: 'LauncherPodDeleted' } },
    'pod deleted while scheduling',
  );

  const waiting = nextVmiStatus({ vmi: vmi('Running'), pod: pod({ nodeName: 'n', phase: 'Failed', finishedAt: at(-10) }), now });
  t.same(
    waiting,
    { status: vmi('Running').status, recheckAfterMs: AGENT_GRACE_MS - 10_000 },
    'a Running VMI gives the agent time to report its end',
  );
  const late = nextVmiStatus({ vmi: vmi('Running'), pod: pod({ nodeName: 'n', phase: 'Failed', finishedAt: at(-31) }), now });
  t.match(late.status, { phase: 'Failed', reason: 'LauncherPodFailed' }, 'then fails it');
  t.same(phases(late.status), ['Running', 'Failed']);

  const deleting = vmi('Scheduled', {}, true);
  t.same(nextVmiStatus({ vmi: deleting, now }).status, deleting.status, 'a VMI being deleted is left alone');
});

t.test('a launcher pod that ended because its VM migrated away fails nothing: the VMI lives on, on its target', async (t) => {
  const migrated = pod({ nodeName: 'n', phase: 'Succeeded', finishedAt: '2026-01-01T00:00:00Z' });
  migrated.status!.reason = 'Migrated';
  const running = vmi('Running');
  const later = new Date(now.getTime() + 3_600_000);
  t.same(nextVmiStatus({ vmi: running, pod: migrated, now: later }), { status: running.status }, 'unchanged, however long after');
});
