import t from 'tap';
import type { VmObservation } from './status.js';
import { nodeVmiStatus, type NodeVmiStatusInput } from './vmi-status.js';
import type { VirtualMachineInstanceStatus } from '../kubevirt/types.js';

const before = new Date('2026-11-22T05:00:00Z');
const now = new Date('2026-11-22T05:01:00Z');
const running: VmObservation = { phase: 'Running', reason: 'Booted', guestReady: true, restartCount: 0, agentConnected: false };
const scheduled: VirtualMachineInstanceStatus = {
  phase: 'Scheduled',
  nodeName: 'node-1',
  phaseTransitionTimestamps: [{ phase: 'Scheduled', phaseTransitionTimestamp: before.toISOString() }],
  conditions: [{ type: 'Synchronized', status: 'True', lastTransitionTime: before.toISOString() }],
};
const input = (over: Partial<NodeVmiStatusInput>): NodeVmiStatusInput => ({
  current: scheduled,
  nodeName: 'node-1',
  unsupported: [],
  now,
  ...over,
});
const types = (s: VirtualMachineInstanceStatus) => (s.conditions ?? []).map((c) => [c.type, c.status, c.reason]);

t.test('a running VM: phase Running with its transition, Ready, the controller’s conditions kept', async (t) => {
  const s = nodeVmiStatus(input({ vm: running }));
  t.match(s, {
    phase: 'Running',
    nodeName: 'node-1',
    phaseTransitionTimestamps: [{ phase: 'Scheduled' }, { phase: 'Running', phaseTransitionTimestamp: now.toISOString() }],
  });
  t.same(types(s), [
    ['Synchronized', 'True', undefined],
    ['Ready', 'True', undefined],
  ]);
  t.notOk('guestOSInfo' in s, 'no guest OS info without an agent');
});

t.test('paused by a user: phase stays Running, Paused True (PausedByUser), not Ready; unpaused removes Paused', async (t) => {
  const paused = nodeVmiStatus(input({ vm: { ...running, phase: 'Paused', reason: 'Paused' } }));
  t.match(paused, { phase: 'Running' });
  t.same(types(paused).slice(1), [
    ['Ready', 'False', 'NotRunning'],
    ['Paused', 'True', 'PausedByUser'],
  ]);
  t.match(
    paused.conditions?.find((c) => c.type === 'Paused'),
    { message: 'VMI was paused by user', lastTransitionTime: now.toISOString() },
  );
  const resumed = nodeVmiStatus(input({ current: paused, vm: running, now: new Date(now.getTime() + 1000) }));
  t.same(types(resumed).slice(1), [['Ready', 'True', undefined]], 'running again: no Paused condition, as KubeVirt');
  t.same(resumed.phaseTransitionTimestamps, paused.phaseTransitionTimestamps, 'no new phase transition');
});

t.test('libvirt paused on an I/O error: PausedIOError', async (t) => {
  const s = nodeVmiStatus(input({ vm: { ...running, phase: 'Paused', reason: 'IOError' } }));
  t.match(
    s.conditions?.find((c) => c.type === 'Paused'),
    { status: 'True', reason: 'PausedIOError' },
  );
});

t.test('the guest agent: AgentConnected and guestOSInfo while connected, both gone with it', async (t) => {
  const osInfo = { name: 'Debian GNU/Linux', id: 'debian', kernelRelease: '6.1.0-28-amd64', machine: 'x86_64' };
  const connected = nodeVmiStatus(input({ vm: { ...running, agentConnected: true, guestOsInfo: osInfo } }));
  t.same(connected.guestOSInfo, osInfo);
  t.match(
    connected.conditions?.find((c) => c.type === 'AgentConnected'),
    { status: 'True' },
  );
  const gone = nodeVmiStatus(input({ current: connected, vm: { ...running, agentConnected: false } }));
  t.same([gone.guestOSInfo, gone.conditions?.some((c) => c.type === 'AgentConnected')], [undefined, false]);
});

t.test('unsupported fields and a VM that cannot run', async (t) => {
  const message = 'spec.volumes[1].hostDisk.path: must be an absolute path to a file without relative components';
  const s = nodeVmiStatus(input({ invalid: { reason: 'InvalidVMSpec', message }, unsupported: ['spec.domain.devices.watchdog'] }));
  t.match(s, { phase: 'Failed', reason: 'InvalidVMSpec' });
  t.match(
    s.conditions?.find((c) => c.type === 'Synchronized'),
    { status: 'False', reason: 'InvalidVMSpec', message },
    'Synchronized False names the field',
  );
  t.match(
    s.conditions?.find((c) => c.type === 'UnsupportedFields'),
    { status: 'True', reason: 'Ignored', message: 'vkvm does not realize: spec.domain.devices.watchdog' },
  );
  t.notOk(
    nodeVmiStatus(input({ current: s, vm: running })).conditions?.some((c) => c.type === 'UnsupportedFields'),
    'the condition goes when no field is unsupported any more',
  );
});

t.test('before the VM reported anything the phase is left to the cluster controller', async (t) => {
  t.match(nodeVmiStatus(input({})), { phase: 'Scheduled', phaseTransitionTimestamps: scheduled.phaseTransitionTimestamps });
});

t.test('an image the node cannot get: Synchronized False with the pull reason, phase left alone, cleared once it runs', async (t) => {
  const s = nodeVmiStatus(
    input({ imageError: { reason: 'ImagePullBackOff', message: 'spec.volumes[0].containerDisk.image: /nope.qcow2 not found' } }),
  );
  t.match(s, {
    phase: 'Scheduled',
    conditions: [{ type: 'Synchronized', status: 'False', reason: 'ImagePullBackOff', message: /nope\.qcow2/ }],
  });
  t.notOk('reason' in s, 'no failure reason: the VMI waits for the image');
  const later = nodeVmiStatus(input({ current: s, vm: running }));
  t.notOk(
    later.conditions?.some((c) => c.type === 'Synchronized'),
    "the node's Synchronized condition goes once the VM runs",
  );
  const controllers = nodeVmiStatus(
    input({ current: { ...scheduled, conditions: [{ type: 'Synchronized', status: 'False', reason: 'FailedCreate' }] }, vm: running }),
  );
  t.match(
    controllers.conditions?.find((c) => c.type === 'Synchronized'),
    { reason: 'FailedCreate' },
    "the cluster controller's Synchronized reason is not the node's to clear",
  );
});

t.test(
  'a start that failed (the node out of disk): Synchronized False, CreateContainerError; the VMI waits; cleared once it runs',
  async (t) => {
    const s = nodeVmiStatus(input({ startError: { message: 'ENOSPC: no space left on device' }, vm: { ...running, phase: 'Failed' } }));
    t.match(s, {
      phase: 'Scheduled',
      conditions: [{ type: 'Synchronized', status: 'False', reason: 'CreateContainerError', message: /no space left/ }],
    });
    t.notOk(
      nodeVmiStatus(input({ current: s, vm: running })).conditions?.some((c) => c.type === 'Synchronized'),
      'gone once the VM runs',
    );
  },
);

t.test('a running VM carries LiveMigratable and its migration method; before it runs, neither', async (t) => {
  const refused = {
    migratable: false as const,
    reason: 'DisksNotLiveMigratable' as const,
    message: 'cannot migrate VMI with non-shared HostDisk',
    method: 'BlockMigration' as const,
  };
  const s = nodeVmiStatus(input({ vm: running, migratability: refused }));
  const pending = nodeVmiStatus(input({ migratability: refused }));
  t.same(
    [
      s.conditions?.find((c) => c.type === 'LiveMigratable'),
      s.migrationMethod,
      pending.conditions?.find((c) => c.type === 'LiveMigratable'),
    ],
    [
      {
        type: 'LiveMigratable',
        status: 'False',
        lastProbeTime: null,
        lastTransitionTime: now.toISOString(),
        reason: 'DisksNotLiveMigratable',
        message: 'cannot migrate VMI with non-shared HostDisk',
      },
      'BlockMigration',
      undefined,
    ],
  );
});
