// Issue 25, the API side of live migration, on `vkvm up --nodes 2` with
// KubeVirt's virtctl v1.5.1: a tenant with `edit` may not migrate (403); an
// operator with `edit` and `kubevirt.io:migrate` may. Its `virtctl migrate`
// creates the VMIM, which reaches Scheduled with the target pod bound to the
// other node and held Pending there (that node does not receive migrations
// yet: it never boots the pod as a second VM). A second migration of the VM
// meanwhile is refused (through virtctl, and as a VMIM created directly);
// `virtctl migrate-cancel` deletes the VMIM and its target pod, leaving the VM
// untouched; a VM with a hostDisk is refused as not live-migratable.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { RbacAuthorizationV1Api } from '@kubernetes/client-node';
import type { VirtualMachine, VirtualMachineInstanceMigration } from '../../provider/kubevirt/types.js';
import { ensureVirtctl, runVirtctl } from '../helpers/virtctl.js';
import {
  condition,
  createTenant,
  events,
  kubeconfigFile,
  poll,
  pods,
  serviceAccounts,
  smokeVm,
  startUpCluster,
  virtualMachineInstanceMigrations,
  virtualMachineInstances,
  waitFor,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-migapi';
const NS = 'e2e-migration-api';
const BOOT_DEADLINE_MS = 300_000;
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };

t.test('live migration API: virtctl migrate and migrate-cancel, the migrate role, admission', async (t) => {
  const virtctlBin = await ensureVirtctl();
  // hostDisks are off unless the operator names a directory for them.
  const disks = await mkdtemp(join(tmpdir(), 'vkvm-e2e-migapi-disks-'));
  await chmod(disks, 0o755);
  t.teardown(() => rm(disks, { recursive: true, force: true }));
  const up = await startUpCluster(t, { nodes: 2, nodeName: NODE, extraArgs: [`--host-disk-dir=${disks}`] });
  const [a, b] = up.nodes as [(typeof up.nodes)[0], (typeof up.nodes)[0]];
  const admin = up.clients;

  await admin.core.createNamespace({ body: { metadata: { name: NS } } });
  t.teardown(() => admin.core.deleteNamespace({ name: NS }).catch(() => undefined));
  await waitFor(serviceAccounts(admin, NS, { name: 'default' }), () => true, { what: 'made by the service account controller' });
  const tenant = await createTenant(admin, NS);
  const operator = await createTenant(admin, NS, 'operator');
  await admin.kc.makeApiClient(RbacAuthorizationV1Api).createNamespacedRoleBinding({
    namespace: NS,
    body: {
      metadata: { name: 'operator-migrate' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'kubevirt.io:migrate' },
      subjects: [{ kind: 'ServiceAccount', name: 'operator', namespace: NS }],
    },
  });
  const kubeconfigs = { tenant: await kubeconfigFile(t, tenant), operator: await kubeconfigFile(t, operator) };
  const virtctl = (who: keyof typeof kubeconfigs, args: string[]) =>
    runVirtctl(virtctlBin, [`--kubeconfig=${kubeconfigs[who]}`, `--namespace=${NS}`, ...args]);

  await poll(
    'APIService v1.subresources.kubevirt.io Available',
    () =>
      admin.objects.read({
        apiVersion: 'apiregistration.k8s.io/v1',
        kind: 'APIService',
        metadata: { name: 'v1.subresources.kubevirt.io' },
      }),
    (s) => condition(s as { status?: { conditions?: Array<{ type: string; status: string }> } }, 'Available') === 'True',
    { deadlineMs: 120_000 },
  );

  // The hostDisk VM on node 1, where its directory is. testvm is not pinned: a VMI's own nodeSelector binds its
  // migration target too (as in KubeVirt), so a VMI pinned to one node cannot move.
  const onNodeA = (vm: VirtualMachine): VirtualMachine => {
    vm.spec.template!.spec.nodeSelector = { 'kubernetes.io/hostname': a.name };
    return vm;
  };
  const pinned = onNodeA(smokeVm('pinned'));
  const pinnedSpec = pinned.spec.template!.spec;
  pinnedSpec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
  pinnedSpec.volumes!.push({ name: 'data', hostDisk: { path: join(disks, 'pinned.img'), type: 'DiskOrCreate', capacity: '16Mi' } });
  for (const vm of [smokeVm('testvm'), pinned])
    await tenant.custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: vm });
  const [vmi, pinnedVmi] = await Promise.all(
    ['testvm', 'pinned'].map((name) =>
      waitFor(
        virtualMachineInstances(admin, NS, { name }),
        (v) => v.status?.phase === 'Running' && v.status.conditions?.some((c) => c.type === 'LiveMigratable') === true,
        { what: 'Running, with LiveMigratable', deadlineMs: BOOT_DEADLINE_MS },
      ),
    ),
  );
  // The node testvm runs on, and the one its migration must target.
  const [from, to] = vmi!.status?.nodeName === a.name ? [a, b] : [b, a];
  t.same(
    [vmi, pinnedVmi].map((v) => ({
      node: v!.status?.nodeName,
      migratable: v!.status?.conditions?.find((c) => c.type === 'LiveMigratable')?.status,
      method: v!.status?.migrationMethod,
    })),
    [
      { node: from.name, migratable: 'True', method: 'BlockMigration' },
      { node: a.name, migratable: 'False', method: 'BlockMigration' },
    ],
    'both VMs run; the hostDisk one is not live-migratable',
  );
  const launcherOf = async () =>
    (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: `kubevirt.io/created-by=${vmi!.metadata.uid}` })).items;
  const [source] = await launcherOf();

  await t.test('a tenant with edit but not the migrate role gets 403 from virtctl migrate', async (t) => {
    t.match(
      await virtctl('tenant', ['migrate', 'testvm']),
      { code: 1, stderr: /forbidden|cannot update resource "virtualmachines\/migrate"/i },
      'refused',
    );
    t.same((await operator.custom.listNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstancemigrations' })).items, [], 'no VMIM');
  });

  await t.test('a VM with a hostDisk is refused as not live-migratable', async (t) => {
    t.match(await virtctl('operator', ['migrate', 'pinned']), {
      code: 1,
      stderr: /Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI with non-shared HostDisk/,
    });
  });

  const vmims = (sel = {}) => virtualMachineInstanceMigrations(admin, NS, sel);
  let migration: VirtualMachineInstanceMigration | undefined;
  await t.test("the operator's virtctl migrate: Scheduled, the target pod bound to the other node and held Pending there", async (t) => {
    t.match(await virtctl('operator', ['migrate', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to migrate/ });
    migration = await waitFor(vmims({ labelSelector: 'kubevirt.io/vmi-name=testvm' }), (m) => m.status?.phase === 'Scheduled', {
      what: 'Scheduled',
      deadlineMs: 120_000,
    }).catch(async (err: Error) => {
      const targets = await admin.core.listNamespacedPod({ namespace: NS, labelSelector: 'kubevirt.io/migrationJobUID' });
      throw new Error(
        `${err.message}\ntarget pods: ${JSON.stringify(targets.items.map((p) => ({ spec: p.spec?.nodeSelector, status: p.status })))}`,
      );
    });
    const uid = migration.metadata.uid!;
    const held = await waitFor(events(admin, NS), (e) => e.reason === 'MigrationTargetHeld' && e.involvedObject?.kind === 'Pod', {
      what: 'the target node holding the pod',
      deadlineMs: 60_000,
    });
    const [target] = (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: `kubevirt.io/migrationJobUID=${uid}` })).items;
    const now = await admin.custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', name: 'testvm' });
    t.match(
      {
        vmim: {
          name: migration.metadata.name,
          finalizers: migration.metadata.finalizers,
          transitions: migration.status?.phaseTransitionTimestamps?.map((p) => p.phase),
        },
        target: { node: target?.spec?.nodeName, phase: target?.status?.phase, heldBy: held.involvedObject?.name, held: held.message },
        vmi: { node: (now as typeof vmi)!.status?.nodeName, phase: (now as typeof vmi)!.status?.phase },
      },
      {
        vmim: {
          name: /^kubevirt-migrate-vm-/,
          finalizers: ['kubevirt.io/migrationJobFinalize'],
          transitions: ['Pending', 'Scheduling', 'Scheduled'],
        },
        target: { node: to.name, phase: 'Pending', heldBy: target?.metadata?.name, held: /does not receive migrations yet/ },
        vmi: { node: from.name, phase: 'Running' },
      },
      'the VMIM Scheduled; its target pod on the other node, Pending, held; the VM still on its own',
    );
  });

  await t.test('a second migration while one is unfinished is refused', async (t) => {
    t.match(await virtctl('operator', ['migrate', 'testvm']), { code: 1, stderr: /in-flight migration detected/ }, 'through virtctl');
    await operator.custom.createNamespacedCustomObject({
      ...KV,
      plural: 'virtualmachineinstancemigrations',
      body: {
        apiVersion: 'kubevirt.io/v1',
        kind: 'VirtualMachineInstanceMigration',
        metadata: { name: 'direct' },
        spec: { vmiName: 'testvm' },
      },
    });
    const direct = await waitFor(vmims({ name: 'direct' }), (m) => m.status?.phase === 'Failed', { what: 'Failed' });
    t.match(
      direct.status?.migrationState,
      { failed: true, failureReason: /^Rejected: in-flight migration detected/ },
      'created directly: Rejected',
    );
    t.equal((await launcherOf()).length, 2, 'no second target pod');
  });

  await t.test('virtctl migrate-cancel deletes the VMIM and its target pod; the VM is untouched', async (t) => {
    const r = await virtctl('operator', ['migrate-cancel', 'testvm']);
    t.same({ code: r.code, stderr: r.stderr }, { code: 0, stderr: '' }, 'migrate-cancel accepted');
    await waitForGone(vmims({ name: migration!.metadata.name! }), { deadlineMs: 60_000 });
    await waitForGone(pods(admin, NS, { labelSelector: `kubevirt.io/migrationJobUID=${migration!.metadata.uid}` }), { deadlineMs: 60_000 });
    const after = await waitFor(virtualMachineInstances(admin, NS, { name: 'testvm' }), () => true);
    const launchers = await launcherOf();
    t.same(
      {
        vmi: { uid: after.metadata.uid, node: after.status?.nodeName, phase: after.status?.phase },
        launchers: launchers.map((p) => ({ name: p.metadata?.name, node: p.spec?.nodeName, phase: p.status?.phase })),
      },
      {
        vmi: { uid: vmi!.metadata.uid, node: from.name, phase: 'Running' },
        launchers: [{ name: source?.metadata?.name, node: from.name, phase: 'Running' }],
      },
      'the same VMI runs on its node in the same launcher pod',
    );
  });
});
