// Issue 25, drain: `kubectl drain NODE --ignore-daemonsets` on `vkvm up
// --nodes 2` against the eviction webhook (deploy/eviction-webhook.yaml) and
// the evacuation controller. A tenant with `edit` creates three VMs on node 1
// (node 2 cordoned): evictionStrategy None is evicted; LiveMigrate with a
// hostDisk (not live-migratable) blocks the drain with a 429 saying why and an
// EvictionBlocked Event; LiveMigrate and migratable is refused with 429 while
// an evacuation VMIM is made and status.evacuationNodeName is set. Its target
// pod cannot be placed (node 2 is cordoned), so the evacuation stays pending;
// uncordoning node 1 cancels it: the VMIM is deleted and the mark cleared.
// Then, with node 2 open and the blocking VM gone, `kubectl drain` of node 1
// completes: the LiveMigrate VM moves to node 2 (the same VMI, live); the
// LiveMigrateIfPossible VM that cannot migrate (a hostDisk, in a directory
// both nodes have) and the None VM are evicted, and their VMs start them again
// on node 2.
import { join } from 'node:path';
import type { Test } from 'tap';
import type { VirtualMachine } from '../../../provider/kubevirt/types.js';
import {
  createTenant,
  events,
  poll,
  pods,
  serviceAccounts,
  smokeVm,
  virtualMachineInstanceMigrations,
  virtualMachineInstances,
  waitFor,
  waitForGone,
  type UpCluster,
} from '../framework/index.js';

const NS = 'e2e-drain';
const BOOT_DEADLINE_MS = 300_000;
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };

export async function drainSuite(t: Test, up: UpCluster, disks: string): Promise<void> {
  const [a, b] = up.nodes as [(typeof up.nodes)[0], (typeof up.nodes)[0]];
  const admin = up.clients;
  const kubectl = async (args: string[]) => {
    const r = await up.kubectl(args);
    return { code: r.code, out: `${r.stdout}\n${r.stderr}` };
  };
  // The cluster is shared with the suites after this one: both nodes open again, however this one ends.
  t.teardown(async () => {
    await kubectl(['uncordon', a.name, b.name]);
  });

  await admin.core.createNamespace({ body: { metadata: { name: NS } } });
  t.teardown(() => admin.core.deleteNamespace({ name: NS }).catch(() => undefined));
  await waitFor(serviceAccounts(admin, NS, { name: 'default' }), () => true, { what: 'made by the service account controller' });
  const tenant = await createTenant(admin, NS);
  await poll(
    'the eviction webhook registered',
    () =>
      admin.objects
        .read({
          apiVersion: 'admissionregistration.k8s.io/v1',
          kind: 'ValidatingWebhookConfiguration',
          metadata: { name: 'vkvm-pod-eviction' },
        })
        .catch(() => undefined),
    (w) =>
      Boolean((w as { webhooks?: Array<{ clientConfig?: { caBundle?: string } }> } | undefined)?.webhooks?.[0]?.clientConfig?.caBundle),
    { deadlineMs: 120_000 },
  );

  // Everything on node 1: node 2 cordoned (it stays so, which keeps the evacuation below pending).
  t.equal((await kubectl(['cordon', b.name])).code, 0, 'node 2 cordoned');
  const vm = (name: string, strategy: 'None' | 'LiveMigrate'): VirtualMachine => {
    const v = smokeVm(name);
    v.spec.template!.spec.evictionStrategy = strategy;
    return v;
  };
  const pinned = vm('pinned', 'LiveMigrate');
  const pinnedSpec = pinned.spec.template!.spec;
  pinnedSpec.nodeSelector = { 'kubernetes.io/hostname': a.name };
  pinnedSpec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
  pinnedSpec.volumes!.push({ name: 'data', hostDisk: { path: join(disks, 'pinned.img'), type: 'DiskOrCreate', capacity: '16Mi' } });
  for (const body of [vm('plain', 'None'), pinned, vm('mover', 'LiveMigrate')])
    await tenant.custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body });
  const running = await Promise.all(
    ['plain', 'pinned', 'mover'].map((name) =>
      waitFor(
        virtualMachineInstances(admin, NS, { name }),
        (v) => v.status?.phase === 'Running' && v.status.conditions?.some((c) => c.type === 'LiveMigratable') === true,
        { what: `${name} Running, with LiveMigratable`, deadlineMs: BOOT_DEADLINE_MS },
      ),
    ),
  );
  t.same(
    running.map((v) => [v.metadata.name, v.status?.nodeName, v.status?.conditions?.find((c) => c.type === 'LiveMigratable')?.status]),
    [
      ['plain', a.name, 'True'],
      ['pinned', a.name, 'False'],
      ['mover', a.name, 'True'],
    ],
    'the three VMs run on node 1; the hostDisk one is not live-migratable',
  );
  const launcher = async (vmi: string) =>
    (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: `vm.kubevirt.io/name=${vmi},!kubevirt.io/migrationJobUID` }))
      .items[0]!;
  const [plainPod, moverPod] = [await launcher('plain'), await launcher('mover')];

  await t.test('evictionStrategy None: the drain evicts the VM', async (t) => {
    const r = await kubectl(['drain', a.name, '--ignore-daemonsets', '--pod-selector=vm.kubevirt.io/name=plain', '--timeout=120s']);
    t.match(r, { code: 0, out: new RegExp(`pod/${plainPod.metadata!.name} evicted`) }, 'drained');
    await waitForGone(pods(admin, NS, { name: plainPod.metadata!.name! }), { deadlineMs: 60_000 });
  });

  await t.test('LiveMigrate: a VM that cannot migrate blocks the drain saying why; one that can is evacuated', async (t) => {
    const r = await kubectl([
      'drain',
      a.name,
      '--ignore-daemonsets',
      '--pod-selector=vm.kubevirt.io/name in (pinned,mover)',
      '--timeout=15s',
    ]);
    const blocked = `VMI ${NS}/pinned has evictionStrategy LiveMigrate but is not live-migratable: DisksNotLiveMigratable`;
    t.match(r.code, 1, 'the drain does not complete');
    t.match(r.out, blocked, 'the drain prints why it waits for pinned (the 429 message)');
    t.match(r.out, `Eviction triggered evacuation of VMI "${NS}/mover"`, 'and that mover is being evacuated');
    const event = await waitFor(events(admin, NS), (e) => e.reason === 'EvictionBlocked' && e.involvedObject?.name === 'pinned', {
      what: 'the EvictionBlocked event',
    });
    const migration = await waitFor(
      virtualMachineInstanceMigrations(admin, NS, { labelSelector: 'kubevirt.io/vmi-name=mover' }),
      (m) => m.status?.phase === 'Scheduling',
      { what: 'the evacuation VMIM Scheduling', deadlineMs: 60_000 },
    );
    const mover = await waitFor(virtualMachineInstances(admin, NS, { name: 'mover' }), () => true);
    t.match(
      {
        event: { type: event.type, kind: event.involvedObject?.kind, message: event.message },
        vmim: { name: migration.metadata.name, annotations: migration.metadata.annotations },
        mover: { evacuationNodeName: mover.status?.evacuationNodeName, node: mover.status?.nodeName },
        pinned: (await launcher('pinned')).status?.phase,
      },
      {
        event: { type: 'Warning', kind: 'VirtualMachineInstance', message: new RegExp(`^${blocked}`) },
        vmim: {
          name: /^kubevirt-evacuation-/,
          annotations: { 'kubevirt.io/evacuationMigration': a.name, 'vkvm.io/evacuation-node-cordoned': 'true' },
        },
        mover: { evacuationNodeName: a.name, node: a.name },
        pinned: 'Running',
      },
      'pinned keeps running with the reason recorded; mover is marked and has its evacuation migration',
    );
  });

  await t.test('uncordoning the node cancels the evacuation that has not started', async (t) => {
    const [migration] = (
      await admin.custom.listNamespacedCustomObject({
        ...KV,
        plural: 'virtualmachineinstancemigrations',
        labelSelector: 'kubevirt.io/vmi-name=mover',
      })
    ).items as Array<{ metadata: { name: string; uid: string } }>;
    t.equal((await kubectl(['uncordon', a.name])).code, 0, 'node 1 uncordoned');
    await waitForGone(virtualMachineInstanceMigrations(admin, NS, { name: migration!.metadata.name }), { deadlineMs: 60_000 });
    await waitForGone(pods(admin, NS, { labelSelector: `kubevirt.io/migrationJobUID=${migration!.metadata.uid}` }), { deadlineMs: 60_000 });
    const mover = await waitFor(virtualMachineInstances(admin, NS, { name: 'mover' }), (v) => !v.status?.evacuationNodeName, {
      what: 'evacuationNodeName cleared',
      deadlineMs: 60_000,
    });
    const pod = await launcher('mover');
    t.same(
      { vmi: [mover.status?.phase, mover.status?.nodeName], pod: [pod.metadata?.name, pod.status?.phase] },
      { vmi: ['Running', a.name], pod: [moverPod.metadata?.name, 'Running'] },
      'the VM runs on where it was, in the same launcher pod',
    );
    await waitFor(events(admin, NS), (e) => e.reason === 'EvacuationCanceled' && e.involvedObject?.name === 'mover', {
      what: 'the EvacuationCanceled event',
    });
  });

  await t.test(
    'with node 2 open, the drain completes: LiveMigrate moves live; LiveMigrateIfPossible (not migratable) and None restart there',
    async (t) => {
      await tenant.custom.deleteNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name: 'pinned' });
      await waitForGone(virtualMachineInstances(admin, NS, { name: 'pinned' }), { deadlineMs: 120_000 });
      // Not live-migratable (a non-shared hostDisk), not pinned: started on node 1 while node 2 is still cordoned.
      const maybe = smokeVm('maybe');
      const maybeSpec = maybe.spec.template!.spec;
      maybeSpec.evictionStrategy = 'LiveMigrateIfPossible';
      maybeSpec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
      maybeSpec.volumes!.push({ name: 'data', hostDisk: { path: join(disks, 'maybe.img'), type: 'DiskOrCreate', capacity: '16Mi' } });
      await tenant.custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: maybe });
      const before = await Promise.all(
        ['plain', 'mover', 'maybe'].map((name) =>
          waitFor(
            virtualMachineInstances(admin, NS, { name }),
            (v) => v.status?.phase === 'Running' && v.status.conditions?.some((c) => c.type === 'LiveMigratable') === true,
            {
              what: `${name} Running`,
              deadlineMs: BOOT_DEADLINE_MS,
            },
          ),
        ),
      );
      t.equal((await kubectl(['uncordon', b.name])).code, 0, 'node 2 uncordoned');
      const r = await kubectl(['drain', a.name, '--ignore-daemonsets', '--timeout=280s']);
      t.match(r, { code: 0, out: new RegExp(`node/${a.name} drained`) }, 'the drain completes');
      const [plain, mover, evicted] = await Promise.all(
        ['plain', 'mover', 'maybe'].map((name) =>
          // The VMI controller moves nodeName and the migration controller marks the migration completed, each
          // in its own write: the mover's end state is both.
          waitFor(
            virtualMachineInstances(admin, NS, { name }),
            (v) =>
              v.status?.phase === 'Running' &&
              v.status.nodeName === b.name &&
              (name !== 'mover' || v.status.migrationState?.completed === true),
            { what: `${name} Running on node 2${name === 'mover' ? ', its migration completed' : ''}`, deadlineMs: BOOT_DEADLINE_MS },
          ),
        ),
      );
      t.same(
        {
          mover: { sameVmi: mover!.metadata.uid === before[1]!.metadata.uid, migrated: mover!.status?.migrationState?.completed },
          plain: { sameVmi: plain!.metadata.uid === before[0]!.metadata.uid },
          maybe: {
            before: [before[2]!.status?.nodeName, before[2]!.status?.conditions?.find((c) => c.type === 'LiveMigratable')?.status],
            sameVmi: evicted!.metadata.uid === before[2]!.metadata.uid,
          },
        },
        {
          mover: { sameVmi: true, migrated: true },
          plain: { sameVmi: false },
          maybe: { before: [a.name, 'False'], sameVmi: false },
        },
        'mover is the same VMI, migrated; plain and maybe (LiveMigrateIfPossible, not migratable) are new VMIs their VMs started on node 2',
      );
    },
  );
}
