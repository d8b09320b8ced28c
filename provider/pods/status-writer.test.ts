import t from 'tap';
import { pino } from 'pino';
import type { V1Pod } from '@kubernetes/client-node';
import { fakeClock } from '../../test/helpers/fake-clock.js';
import type { LauncherView } from '../launchers/registry.js';
import { newLifecycle, transition } from './lifecycle.js';
import { StatusWriter } from './status-writer.js';

const pod = (resourceVersion: string, status?: V1Pod['status']): V1Pod => ({
  metadata: { name: 'p', namespace: 'ns', uid: 'u1', resourceVersion },
  spec: { nodeName: 'node-1', containers: [{ name: 'vm', image: '/images/disk.qcow2' }] },
  ...(status ? { status } : {}),
});

function writer(dhcpAckedAtUnixMs?: number) {
  const writes: Array<{ name: string; body: { metadata: { uid: string }; status: V1Pod['status'] } }> = [];
  const w = new StatusWriter({
    api: {
      patchPodStatus: async (_ns, name, body) => void writes.push({ name, body: body as (typeof writes)[number]['body'] }),
      patchVmiStatus: async () => {},
    },
    vmis: { read: async () => undefined },
    hostIP: () => '192.0.2.10',
    clock: fakeClock(),
    events: { record: () => undefined },
    onReadinessChange: () => undefined,
    launchers: { get: () => undefined },
    network: { guestDhcpAckedAt: async () => dhcpAckedAtUnixMs },
    log: pino({ level: 'silent' }),
  });
  return { w, writes };
}

t.test(
  'a status is written once: not again while the informer still holds the copy it was written over, again once another write replaced it',
  async (t) => {
    const { w, writes } = writer();
    const lc = transition(newLifecycle(pod('1')), { type: 'startBegan' }, 0);
    await w.sync(pod('1'), lc, undefined);
    await w.sync(pod('1'), lc, undefined);
    const afterTwoSyncs = writes.length;
    // Someone else wrote the pod's status since (resourceVersion 2), and it is not ours.
    await w.sync(pod('2', { phase: 'Pending' }), lc, undefined);
    t.same(
      {
        afterTwoSyncs,
        writes: writes.map((x) => ({
          uid: x.body.metadata.uid,
          phase: x.body.status?.phase,
          reason: x.body.status?.containerStatuses?.[0]?.state?.waiting?.reason,
        })),
      },
      {
        afterTwoSyncs: 1,
        writes: [
          { uid: 'u1', phase: 'Pending', reason: 'ContainerCreating' },
          { uid: 'u1', phase: 'Pending', reason: 'ContainerCreating' },
        ],
      },
    );
  },
);

t.test('a finished pod is never written again, even before the informer has seen it finish', async (t) => {
  const { w, writes } = writer();
  const invalid = transition(
    newLifecycle(pod('1')),
    { type: 'invalid', message: 'invalid VM spec: memory: too small', found: 'translation' },
    0,
  );
  await w.sync(pod('1'), invalid, undefined);
  await w.sync(pod('1'), transition(invalid, { type: 'valid' }, 0), undefined);
  t.same(
    writes.map((x) => [x.body.status?.phase, x.body.status?.reason]),
    [['Failed', 'InvalidVMSpec']],
  );
});

t.test("without a probe, a UEFI VM's pod is Ready once its guest took its address by DHCP in this run, not on OVMF's output", async (t) => {
  const startedAtUnixMs = 1_700_000_000_000;
  const uefi: LauncherView = {
    uid: 'u1',
    dir: '/x',
    live: true,
    client: {} as never,
    pid: 1,
    state: {
      phase: 'Running',
      reason: 'Booted',
      message: '',
      qemuPid: 42,
      startedAtUnixMs,
      consoleLogPath: '/x/console.log',
      domainUuid: 'u1',
      generation: 3,
      consoleOutputAtUnixMs: startedAtUnixMs + 500,
      firmwareOnConsole: true,
      guestAgentConnected: false,
      guestAgentConnectedAtUnixMs: 0,
    },
  };
  const lc = transition(transition(newLifecycle(pod('1')), { type: 'startBegan' }, 0), { type: 'started', specHash: 'h' }, 0);
  const readyWith = async (dhcpAckedAtUnixMs: number | undefined) => {
    const { w, writes } = writer(dhcpAckedAtUnixMs);
    await w.sync(pod('1'), lc, uefi);
    return writes[0]?.body.status?.conditions?.find((c) => c.type === 'Ready')?.status;
  };
  t.same(
    {
      consoleOnly: await readyWith(undefined),
      dhcpOfAnEarlierRun: await readyWith(startedAtUnixMs - 60_000),
      dhcpInThisRun: await readyWith(startedAtUnixMs + 9_000),
    },
    { consoleOnly: 'False', dhcpOfAnEarlierRun: 'False', dhcpInThisRun: 'True' },
  );
});
