import t, { type Test } from 'tap';
import { pino } from 'pino';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import type { EventRecorder } from '../../kube/events.js';
import type { ClusterInformer } from '../../kube/informer.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { MigrationController } from './migration-controller.js';
import { KUBEVIRT_MIGRATION_DEFAULTS } from './policy.js';

/** A cache of objects by ns/name, as the controller reads informers. */
function cache<T extends { metadata?: { name?: string; namespace?: string } }>(items: T[]) {
  // As the informer keys them: namespace/name, or the name alone for a cluster-scoped object.
  const key = (o: T) => (o.metadata?.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : `${o.metadata?.name}`);
  const map = new Map(items.map((o) => [key(o), o]));
  return {
    map,
    put: (o: T) => map.set(key(o), o),
    informer: { get: (k: string) => map.get(k), list: () => [...map.values()], onChange: () => undefined } as unknown as ClusterInformer<T>,
  };
}

function env(t: Test) {
  const vmi: VirtualMachineInstance = {
    metadata: { name: 'vm', namespace: 'ns', uid: 'vmi-uid', resourceVersion: '1' },
    spec: { domain: { resources: { requests: { memory: '128Mi' } } } },
    status: { phase: 'Running', nodeName: 'a' },
  };
  const source: V1Pod = {
    metadata: { name: 'virt-launcher-vm-src', namespace: 'ns', labels: { 'kubevirt.io/created-by': 'vmi-uid' } },
    spec: { nodeName: 'a', containers: [] },
    status: { phase: 'Running' },
  };
  const vmim: VirtualMachineInstanceMigration = {
    metadata: {
      name: 'kubevirt-migrate-vm-x',
      namespace: 'ns',
      uid: 'mig-uid',
      resourceVersion: '1',
      creationTimestamp: '2026-11-27T12:00:00Z',
    },
    spec: { vmiName: 'vm' },
  };
  const vmims = cache([vmim]);
  const vmis = cache([vmi]);
  const pods = cache<V1Pod>([source]);
  const nodes = cache<V1Node>([
    {
      metadata: { name: 'b' },
      status: { conditions: [{ type: 'Ready', status: 'True' }], addresses: [{ type: 'InternalIP', address: '192.0.2.2' }] },
    },
  ]);
  const grants: string[] = [];
  const events: string[] = [];
  let rv = 1;
  const kubevirt = {
    patch: async (_p: string, _ns: string, _n: string, body: { metadata: object }) => {
      const m = vmims.map.get('ns/kubevirt-migrate-vm-x')!;
      vmims.put({ ...m, metadata: { ...m.metadata, ...body.metadata, resourceVersion: String(++rv) } });
    },
    patchStatus: async (plural: string, _ns: string, _n: string, _rv: unknown, status: Record<string, unknown>) => {
      const store = plural === 'virtualmachineinstances' ? vmis : vmims;
      const [k, o] = [...store.map.entries()][0]! as [string, { metadata: object; status?: object }];
      const merged = { ...o, metadata: { ...o.metadata, resourceVersion: String(++rv) }, status: { ...o.status, ...status } };
      store.map.set(k, merged as never);
      return String(rv);
    },
    listMigrationPolicies: async () => ({ items: [] }),
  } as unknown as KubevirtApi;
  const clients = {
    core: {
      listNamespacedPod: async ({ labelSelector }: { labelSelector: string }) => {
        const [k, v] = labelSelector.split('=');
        return { items: pods.informer.list().filter((p) => p.metadata?.labels?.[k!] === v) };
      },
      createNamespacedPod: async ({ body }: { body: V1Pod }) => {
        const pod = {
          ...body,
          metadata: { ...body.metadata, name: `${body.metadata!.generateName}tgt`, uid: 'tgt-uid', creationTimestamp: new Date() },
        };
        pods.put(pod);
        return pod;
      },
      deleteNamespacedPod: async ({ name }: { name: string }) => void pods.map.delete(`ns/${name}`),
      readNamespace: async () => ({ metadata: { labels: {} } }),
    },
    objects: { create: async (o: { kind: string; metadata: { name: string } }) => void grants.push(`${o.kind}/${o.metadata.name}`) },
  } as unknown as KubeClients;
  const recorder = { recordFor: (_o: unknown, _type: string, reason: string) => void events.push(reason) } as unknown as EventRecorder;
  const controller = new MigrationController({
    clients,
    kubevirt,
    vmims: vmims.informer,
    vmis: vmis.informer,
    pods: pods.informer,
    nodes: nodes.informer,
    defaults: KUBEVIRT_MIGRATION_DEFAULTS,
    events: recorder,
    log: pino({ level: 'silent' }),
    now: () => new Date('2026-11-27T12:00:10Z'),
  });
  // Its re-checks are timers (900 s for a pending target pod): stopping the queue clears them.
  t.teardown(() => controller.stop());
  const sync = () => controller.syncMigration('ns/kubevirt-migrate-vm-x');
  const current = () => vmims.map.get('ns/kubevirt-migrate-vm-x');
  const target = () => pods.informer.list().find((p) => p.metadata?.labels?.['kubevirt.io/migrationJobUID'] === 'mig-uid');
  return { sync, current, target, pods, vmis, grants, events, vmims, source };
}

t.test('a migration is adopted, gets one target pod, is Scheduled once bound, hands off, and a cancel deletes its pod', async (t) => {
  const e = env(t);
  await e.sync();
  t.match(e.current(), {
    metadata: { finalizers: ['kubevirt.io/migrationJobFinalize'], labels: { 'kubevirt.io/vmi-name': 'vm' } },
    status: { phase: 'Pending' },
  });
  await e.sync();
  await e.sync(); // a repeat while Scheduling makes no second pod
  t.match({ phase: e.current()?.status?.phase, targets: e.pods.informer.list().length }, { phase: 'Scheduling', targets: 2 });
  t.match(e.target()?.spec?.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution, [
    { labelSelector: { matchLabels: { 'kubevirt.io/created-by': 'vmi-uid' } }, topologyKey: 'kubernetes.io/hostname' },
  ]);

  e.pods.put({ ...e.target()!, spec: { ...e.target()!.spec!, nodeName: 'b' } });
  await e.sync();
  t.same([e.current()?.status?.phase, e.grants], ['Scheduled', ['Role/vkvm-node-vmi-vmi-uid-b', 'RoleBinding/vkvm-node-vmi-vmi-uid-b']]);

  e.pods.put({ ...e.target()!, status: { phase: 'Running' } });
  await e.sync();
  const handedOff = {
    migrationUid: 'mig-uid',
    sourceNode: 'a',
    sourcePod: 'virt-launcher-vm-src',
    targetNode: 'b',
    targetPod: 'virt-launcher-vm-tgt',
    migrationConfiguration: { progressTimeout: 150, completionTimeoutPerGiB: 150, bandwidthPerMigration: '0' },
  };
  t.match(
    { vmim: e.current()?.status, vmi: e.vmis.map.get('ns/vm')?.status },
    {
      vmim: { phase: 'PreparingTarget', migrationState: handedOff },
      vmi: { nodeName: 'a', migrationState: handedOff, migrationTransport: 'Unix' },
    },
    'the handoff: the VMI carries a copy of the migration state',
  );

  const m = e.current()!;
  e.vmims.put({ ...m, metadata: { ...m.metadata, deletionTimestamp: '2026-11-27T12:00:09Z' } });
  await e.sync();
  t.match(
    { phase: e.current()?.status?.phase, target: e.target() },
    { phase: 'Failed', target: undefined },
    'canceled: the target pod deleted',
  );
  await e.sync();
  t.same(e.current()?.metadata.finalizers, [], 'the finalizer released');
  t.match(e.events, ['SuccessfulCreate', 'MigrationCanceled']);
});

t.test('a VMIM for a VMI with an unfinished migration is rejected, with no finalizer and no pod', async (t) => {
  const e = env(t);
  e.vmims.put({
    metadata: { name: 'older', namespace: 'ns', uid: 'older', creationTimestamp: '2026-11-27T11:00:00Z' },
    spec: { vmiName: 'vm' },
    status: { phase: 'Scheduling' },
  });
  await e.sync();
  t.match(e.current(), {
    metadata: { finalizers: undefined },
    status: { phase: 'Failed', migrationState: { failed: true, failureReason: /^Rejected: in-flight migration detected/ } },
  });
  t.equal(e.target(), undefined);
});

t.test("the agents' reports carry a handed-off migration through TargetReady and Running to Succeeded; the VMI moves", async (t) => {
  const e = env(t);
  for (let i = 0; i < 3; i++) await e.sync();
  e.pods.put({ ...e.target()!, spec: { ...e.target()!.spec!, nodeName: 'b' } });
  await e.sync();
  e.pods.put({ ...e.target()!, status: { phase: 'Running' } });
  await e.sync();
  const report = (type: string, reason: string, at: string) => ({
    type,
    status: 'True',
    reason,
    message: `mig-uid: ${reason}`,
    lastTransitionTime: new Date(at),
  });
  const withConditions = (pod: V1Pod, ...conditions: ReturnType<typeof report>[]): V1Pod => ({
    ...pod,
    status: { phase: 'Running', conditions },
  });
  const phases: unknown[] = [];
  e.pods.put(withConditions(e.target()!, report('vkvm.io/MigrationTarget', 'Ready', '2026-11-27T12:00:05Z')));
  await e.sync();
  phases.push([e.current()?.status?.phase, e.vmis.map.get('ns/vm')?.status?.migrationState?.targetNodeAddress]);
  e.pods.put(withConditions(e.source, report('vkvm.io/MigrationSource', 'Started', '2026-11-27T12:00:06Z')));
  await e.sync();
  phases.push([e.current()?.status?.phase, e.current()?.status?.migrationState?.startTimestamp]);
  e.pods.put(withConditions(e.source, report('vkvm.io/MigrationSource', 'Migrated', '2026-11-27T12:00:08Z')));
  await e.sync();
  phases.push([e.current()?.status?.phase, e.vmis.map.get('ns/vm')?.status?.migrationState?.endTimestamp]);
  e.pods.put(withConditions(e.target()!, report('vkvm.io/MigrationTarget', 'Running', '2026-11-27T12:00:09Z')));
  await e.sync();
  const vmi = e.vmis.map.get('ns/vm')?.status;
  phases.push([e.current()?.status?.phase, vmi?.nodeName, vmi?.migrationState?.completed]);
  t.same(phases, [
    ['TargetReady', '192.0.2.2'],
    ['Running', '2026-11-27T12:00:06.000Z'],
    ['Running', '2026-11-27T12:00:08.000Z'],
    ['Succeeded', 'b', true],
  ]);
});
