// Issue 25, live migration on `vkvm up --nodes 2` with KubeVirt's virtctl
// v1.5.1: a tenant with `edit` may not migrate (403); an operator with `edit`
// and `kubevirt.io:migrate` may; a VM with a hostDisk is refused as not
// live-migratable. The VM (containerDisk, cloud-init, an emptyDisk with data
// written) is slowed by a MigrationPolicy, then: a second migration while one
// runs is refused; `virtctl migrate-cancel` mid-way leaves it on its node;
// killing the target launcher mid-way leaves it there too, the VMIM Failed
// with a reason and nothing of it on the target node. Unslowed, `virtctl
// migrate` moves it: the VMI on the other node, the guest's boot_id and the
// emptyDisk's bytes unchanged (read through the guest agent: the guest's
// address is not kept yet).
import { join } from 'node:path';
import type { Test } from 'tap';
import { existsSync } from 'node:fs';
import { RbacAuthorizationV1Api, type V1Pod } from '@kubernetes/client-node';
import { vmNetworkNames } from '../../../provider/network/vm-network.js';
import type { VirtualMachine, VirtualMachineInstanceMigration } from '../../../provider/kubevirt/types.js';
import { ensureVirtctl, runVirtctl } from '../../helpers/virtctl.js';
import {
  condition,
  createTenant,
  kubeconfigFile,
  launcherPidOf,
  pidsWhere,
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

const NS = 'e2e-migration-api';
const BOOT_DEADLINE_MS = 300_000;
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };

export async function migrationApiSuite(t: Test, up: UpCluster, disks: string): Promise<void> {
  const virtctlBin = await ensureVirtctl();
  // hostDisks are off unless the operator names a directory for them.
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
  const stateDirOf = (node: typeof a) => node.simulated?.stateDir ?? up.stateDir;

  // What must not change while the VM moves: its boot and the bytes written on its emptyDisk (vdb).
  const guest = async (pod: string, script: string): Promise<string> => {
    const r = await up.kubectl(['exec', '-n', NS, pod, '--', '/bin/sh', '-c', script]);
    if (r.code !== 0) throw new Error(`guest in ${pod}: ${script}: exit ${r.code}: ${r.stderr}`);
    return r.stdout;
  };
  const FACTS = 'cat /proc/sys/kernel/random/boot_id; head -c 12 /dev/vdb; echo';
  await poll(
    'the guest agent answers',
    () =>
      guest(source!.metadata!.name!, 'true').then(
        () => true,
        () => false,
      ),
    (ok) => ok,
    {
      deadlineMs: 120_000,
      intervalMs: 2000,
    },
  );
  await guest(source!.metadata!.name!, 'printf mig-data-123 > /dev/vdb; sync');
  const before = await guest(source!.metadata!.name!, FACTS);
  t.match(before, /^[0-9a-f-]{36}\nmig-data-123\n$/, 'the guest wrote its emptyDisk');

  // A TCP session held open across the migrations: testvm echoes on :7000, the pinned VM on node 1 sends a line a
  // second and logs what comes back, on one connection. (Background commands hold no descriptor of the exec: the guest
  // agent reports a command finished only once its output pipes close.)
  const ip = source!.status!.podIP!;
  const [pinnedPod] = (
    await admin.core.listNamespacedPod({ namespace: NS, labelSelector: `kubevirt.io/created-by=${pinnedVmi!.metadata.uid}` })
  ).items;
  await poll(
    "the pinned VM's guest agent answers",
    () =>
      guest(pinnedPod!.metadata!.name!, 'true').then(
        () => true,
        () => false,
      ),
    (ok) => ok,
    { deadlineMs: 120_000, intervalMs: 2000 },
  );
  await guest(source!.metadata!.name!, 'nc -l -p 7000 -e /bin/cat </dev/null >/dev/null 2>&1 &');
  await poll(
    'the echo server listens',
    () => guest(source!.metadata!.name!, 'netstat -ltn'),
    (out) => /:7000\s/.test(out),
    { deadlineMs: 30_000, intervalMs: 1000 },
  );
  await guest(
    pinnedPod!.metadata!.name!,
    `(while :; do echo tick; sleep 1; done | nc ${ip} 7000 > /tmp/echo.log 2>&1) </dev/null >/dev/null 2>&1 &`,
  );
  const echoed = async () => Number((await guest(pinnedPod!.metadata!.name!, 'grep -c tick /tmp/echo.log || true')).trim());
  await poll('the echo session runs', echoed, (n) => n >= 2, { deadlineMs: 60_000, intervalMs: 1000 }).catch(async (err: Error) => {
    const diag = async (pod: string, script: string) => guest(pod, script).catch((e: Error) => e.message);
    const client = await diag(
      pinnedPod!.metadata!.name!,
      `cat /tmp/echo.log; netstat -tn; ps; wget -q -T 5 -O - http://${ip}/ | head -c 80`,
    );
    const server = await diag(source!.metadata!.name!, 'netstat -tn; ps; ls -l /bin/cat');
    throw new Error(`${err.message}; the client: ${client}; the server: ${server}`);
  });

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
  const targetPodOf = async (m: VirtualMachineInstanceMigration): Promise<V1Pod | undefined> =>
    (await admin.core.listNamespacedPod({ namespace: NS, labelSelector: `kubevirt.io/migrationJobUID=${m.metadata.uid}` })).items[0];
  /** Starts a migration of testvm and waits until the source copies (phase Running). */
  const migrateUntilRunning = async (): Promise<VirtualMachineInstanceMigration> => {
    t.match(await virtctl('operator', ['migrate', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to migrate/ });
    return waitFor(vmims({ labelSelector: 'kubevirt.io/vmi-name=testvm' }), (m) => m.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: 240_000,
    });
  };
  /** What is left of a VM's pod on a node: processes naming it, its VM directory, its network namespace. */
  const footprint = async (node: typeof a, podUid: string) => ({
    processes: pidsWhere((argv) => argv.some((x) => x.includes(podUid))).length,
    vmDir: existsSync(join(stateDirOf(node), 'vms', podUid)),
    netns: (await node.exec(['ip', 'netns', 'list'])).stdout.includes(vmNetworkNames(podUid).netns),
  });
  const NOTHING = { processes: 0, vmDir: false, netns: false };
  /** The VM still runs on its node, in its own launcher pod, with its boot and bytes. */
  const stillOnSource = async (t: Test) => {
    const after = await waitFor(virtualMachineInstances(admin, NS, { name: 'testvm' }), () => true);
    t.same(
      {
        vmi: { node: after.status?.nodeName, phase: after.status?.phase },
        launchers: (await launcherOf()).map((p) => ({ name: p.metadata?.name, phase: p.status?.phase })),
        guest: await guest(source!.metadata!.name!, FACTS),
      },
      { vmi: { node: from.name, phase: 'Running' }, launchers: [{ name: source?.metadata?.name, phase: 'Running' }], guest: before },
      'the VM runs on in its own launcher pod on its node, with the same boot and bytes',
    );
  };

  // 1 MiB/s: 128 MiB of guest memory cannot move before the cancel and the kill below.
  await admin.custom.createClusterCustomObject({
    group: 'migrations.kubevirt.io',
    version: 'v1alpha1',
    plural: 'migrationpolicies',
    body: {
      apiVersion: 'migrations.kubevirt.io/v1alpha1',
      kind: 'MigrationPolicy',
      metadata: { name: 'e2e-migration-slow' },
      spec: { selectors: { namespaceSelector: { 'kubernetes.io/metadata.name': NS } }, bandwidthPerMigration: '1Mi' },
    },
  });
  const deletePolicy = () =>
    admin.custom
      .deleteClusterCustomObject({
        group: 'migrations.kubevirt.io',
        version: 'v1alpha1',
        plural: 'migrationpolicies',
        name: 'e2e-migration-slow',
      })
      .catch(() => undefined);
  t.teardown(deletePolicy);

  await t.test('a second migration while one runs is refused; migrate-cancel mid-way leaves the VM on its node', async (t) => {
    const migration = await migrateUntilRunning();
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
    const target = await targetPodOf(migration);
    t.equal(target?.spec?.nodeName, to.name, 'the target pod is on the other node');

    const r = await virtctl('operator', ['migrate-cancel', 'testvm']);
    t.same({ code: r.code, stderr: r.stderr }, { code: 0, stderr: '' }, 'migrate-cancel accepted');
    await waitForGone(vmims({ name: migration.metadata.name! }), { deadlineMs: 120_000 });
    await waitForGone(pods(admin, NS, { labelSelector: `kubevirt.io/migrationJobUID=${migration.metadata.uid}` }), { deadlineMs: 60_000 });
    await stillOnSource(t);
    t.same(await footprint(to, target!.metadata!.uid!), NOTHING, 'nothing of the target is left on its node');
  });

  await t.test(
    'killing the target launcher mid-way: the VMIM Failed with a reason, the VM on its node, nothing left on the target',
    async (t) => {
      const migration = await migrateUntilRunning();
      const target = (await targetPodOf(migration))!;
      const pid = await launcherPidOf({ stateDir: stateDirOf(to) } as Parameters<typeof launcherPidOf>[0], target.metadata!.uid!);
      process.kill(pid, 'SIGKILL');
      const failed = await waitFor(vmims({ name: migration.metadata.name! }), (m) => m.status?.phase === 'Failed', {
        what: 'Failed',
        deadlineMs: 120_000,
      });
      t.match(
        failed.status?.migrationState,
        { failed: true, failureReason: /^(SourceFailed|TargetFailed|Aborted): ./ },
        'Failed, with a reason',
      );
      t.comment(`failure: ${failed.status?.migrationState?.failureReason}`);
      await waitForGone(pods(admin, NS, { labelSelector: `kubevirt.io/migrationJobUID=${migration.metadata.uid}` }), {
        deadlineMs: 120_000,
      });
      await stillOnSource(t);
      t.same(
        await poll(
          'the target node clean',
          () => footprint(to, target.metadata!.uid!),
          (f) => JSON.stringify(f) === JSON.stringify(NOTHING),
          {
            deadlineMs: 30_000,
          },
        ).catch(() => footprint(to, target.metadata!.uid!)),
        NOTHING,
        'no QEMU, launcher, VM directory or network namespace of the target left on its node',
      );
    },
  );

  await t.test("virtctl migrate moves the running VM to the other node, with its boot and its disk's bytes", async (t) => {
    await deletePolicy();
    const earlier = new Set((await vmims().listRaw()).items.map((m) => (m.metadata as { name?: string } | undefined)?.name));
    const t0 = Date.now();
    t.match(await virtctl('operator', ['migrate', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to migrate/ });
    const done = await waitFor(
      vmims({ labelSelector: 'kubevirt.io/vmi-name=testvm' }),
      (m) => !earlier.has(m.metadata.name) && (m.status?.phase === 'Succeeded' || m.status?.phase === 'Failed'),
      { what: 'Succeeded', deadlineMs: 300_000 },
    );
    t.comment(`migrated in ${Date.now() - t0} ms`);
    const vmiAfter = await waitFor(
      virtualMachineInstances(admin, NS, { name: 'testvm' }),
      (v) => v.status?.nodeName === to.name && v.status.migrationState?.completed === true,
      {
        // The controller moves the VMI, writes the VMIM, then copies its final state into the VMI.
        what: 'on the target node, its migration completed',
        deadlineMs: 60_000,
      },
    );
    const target = (await targetPodOf(done))!;
    const sourceAfter = await admin.core.readNamespacedPod({ namespace: NS, name: source!.metadata!.name! });
    t.match(
      {
        vmim: {
          phase: done.status?.phase,
          transitions: done.status?.phaseTransitionTimestamps?.map((p) => p.phase).join(),
          state: done.status?.migrationState,
        },
        vmi: { node: vmiAfter.status?.nodeName, phase: vmiAfter.status?.phase, state: vmiAfter.status?.migrationState },
        source: { phase: sourceAfter.status?.phase, reason: sourceAfter.status?.reason },
      },
      {
        vmim: {
          phase: 'Succeeded',
          // Running may pass unseen when the copy ends before the controller looks again.
          transitions: /^Pending,Scheduling,Scheduled,PreparingTarget,TargetReady,(Running,)?Succeeded$/,
          state: { completed: true, sourceNode: from.name, targetNode: to.name },
        },
        vmi: { node: to.name, phase: 'Running', state: { completed: true, migrationUid: done.metadata.uid } },
        source: { phase: 'Succeeded', reason: 'Migrated' },
      },
      'the VMIM Succeeded through every phase; the VMI runs on the other node; the source pod ended as Migrated',
    );
    t.equal(await guest(target.metadata!.name!, FACTS), before, 'the same boot_id and the same bytes on the emptyDisk');
    t.same(
      { pod: target.status?.podIP, vmi: vmiAfter.status?.interfaces?.[0]?.ipAddress },
      { pod: ip, vmi: ip },
      'the VMI and its new launcher pod keep the IP',
    );
    const atMove = await echoed();
    const later = await poll('the same session echoes on', echoed, (n) => n >= atMove + 3, { deadlineMs: 30_000, intervalMs: 1000 });
    t.ok(later >= atMove + 3, `the TCP session opened before the move still echoes (${atMove} → ${later} lines)`);
  });

  await t.test('and back: the other node is a source too, the first a target', async (t) => {
    const earlier = new Set((await vmims().listRaw()).items.map((m) => (m.metadata as { name?: string } | undefined)?.name));
    t.match(await virtctl('operator', ['migrate', 'testvm']), { code: 0 });
    const done = await waitFor(
      vmims({ labelSelector: 'kubevirt.io/vmi-name=testvm' }),
      (m) => !earlier.has(m.metadata.name) && (m.status?.phase === 'Succeeded' || m.status?.phase === 'Failed'),
      { what: 'Succeeded', deadlineMs: 300_000 },
    );
    const home = (await targetPodOf(done))!;
    t.same(
      { phase: done.status?.phase, from: done.status?.migrationState?.sourceNode, to: done.status?.migrationState?.targetNode },
      { phase: 'Succeeded', from: to.name, to: from.name },
      'migrated back',
    );
    t.equal(await guest(home.metadata!.name!, FACTS), before, 'still the same boot and bytes');
  });
}
