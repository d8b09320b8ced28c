import t from 'tap';
import { pino } from 'pino';
import { ApiException } from '@kubernetes/client-node';
import type { ClusterInformer } from '../kube/informer.js';
import type { VirtualMachine, VirtualMachineInstance } from '../kubevirt/types.js';
import type { DataVolume } from '../kubevirt/datavolume-types.js';
import { VmController } from './vm-controller.js';

/** A refused VMI create whose response headers differ on every attempt, as a real apiserver's audit-id does. */
function refusal(n: number, cause: string, message: string): ApiException<unknown> {
  const body = { kind: 'Status', status: 'Failure', message, reason: 'Forbidden', code: 403, details: { causes: [{ reason: cause }] } };
  return new ApiException(403, 'Forbidden', JSON.stringify(body), { 'audit-id': `a-${n}`, date: `t-${n}` });
}

/** A VM controller over a fake API whose status writes come back through the VM watch, as the real ones do. */
function env(createError: (n: number) => Error) {
  let vm: VirtualMachine = {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid', resourceVersion: '1' },
    spec: { runStrategy: 'Always', template: { spec: { domain: { devices: {} } } } },
  } as VirtualMachine;
  const handlers: Array<(vm: VirtualMachine) => void> = [];
  const vms = {
    get: (key: string) => (key === 'ns/vm' ? vm : undefined),
    list: () => [vm],
    onChange: (h: (vm: VirtualMachine) => void) => void handlers.push(h),
  } as unknown as ClusterInformer<VirtualMachine>;
  const vmis = { get: () => undefined, list: () => [], onChange: () => undefined } as unknown as ClusterInformer<VirtualMachineInstance>;
  const counts = { creates: 0, statusWrites: 0, events: 0 };
  const kubevirt = {
    createVmi: async () => {
      throw createError(++counts.creates);
    },
    patchStatus: async (_plural: string, _ns: string, _name: string, _rv: string, status: Record<string, unknown>) => {
      counts.statusWrites++;
      const rv = String(Number(vm.metadata.resourceVersion) + 1);
      vm = { ...vm, metadata: { ...vm.metadata, resourceVersion: rv }, status: { ...(vm.status ?? {}), ...status } };
      setImmediate(() => handlers.forEach((h) => h(vm)));
      return rv;
    },
  };
  const controller = new VmController({
    kubevirt: kubevirt as never,
    vms,
    vmis,
    events: { recordFor: () => void counts.events++ } as never,
    instancetypes: {} as never,
    dataVolumes: {} as never,
    dataVolumeEvents: { onChange: () => undefined } as never,
    log: pino({ level: 'silent' }),
  });
  return { controller, counts, vm: () => vm };
}

const forMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Waits (10 s at most, a loaded box included) until `done`; the assertions after it bound what follows. */
async function until(done: () => boolean): Promise<void> {
  for (const end = Date.now() + 10_000; !done() && Date.now() < end;) await forMs(20);
}

t.test('a VMI create refused because the namespace is being deleted is not retried, and the VM says why once', async (t) => {
  const message =
    'virtualmachineinstances.kubevirt.io "vm" is forbidden: unable to create new content in namespace ns because it is being terminated';
  const e = env((n) => refusal(n, 'NamespaceTerminating', message));
  e.controller.start();
  await until(() => e.counts.creates >= 2);
  // Any retry would come within its first back-off (0.4–0.6 s).
  await forMs(1_000);
  e.controller.stop();
  const failure = e.vm().status?.conditions?.find((c) => c.type === 'Failure');
  t.same(
    { ...e.counts, failure: failure?.message },
    { creates: 2, statusWrites: 1, events: 0, failure: `failed to create the VMI: ${message}` },
    'the first attempt and the one its status write brought back; no Event, no retry',
  );
});

t.test('a VMI create that keeps failing backs off: its own status write does not requeue it hot', async (t) => {
  const message = 'virtualmachineinstances.kubevirt.io "vm" is forbidden: exceeded quota: q';
  const e = env((n) => refusal(n, 'FieldValueForbidden', message));
  e.controller.start();
  // The first attempt, the one its status write brought back, and a retry after the back-off.
  await until(() => e.counts.creates >= 3);
  const before = e.counts.creates;
  await forMs(1_000);
  e.controller.stop();
  t.same(
    { retried: before >= 3, hot: e.counts.creates - before > 2, statusWrites: e.counts.statusWrites },
    { retried: true, hot: false, statusWrites: 1 },
    'the same words on each failure (no headers), so one status write; then retries at 0.5 s, 1 s, … (a hot loop made thousands a second)',
  );
});

t.test("a change of a VM's DataVolume wakes the VM (watched, not polled); another owner's does not", async (t) => {
  const vm = {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid', resourceVersion: '1' },
    spec: {
      runStrategy: 'Always',
      dataVolumeTemplates: [{ metadata: { name: 'root' }, spec: { source: { blank: {} } } }],
      template: { spec: { domain: { devices: {} } } },
    },
  } as VirtualMachine;
  const vms = { get: (key: string) => (key === 'ns/vm' ? vm : undefined), list: () => [vm], onChange: () => undefined };
  const vmis = { get: () => undefined, list: () => [], onChange: () => undefined };
  let dvHandler: (dv: DataVolume) => void = () => undefined;
  let ensures = 0;
  const controller = new VmController({
    // The fake keeps the VM as it is: its status write leaves the cached version current.
    kubevirt: { patchStatus: async () => vm.metadata.resourceVersion } as never,
    vms: vms as unknown as ClusterInformer<VirtualMachine>,
    vmis: vmis as unknown as ClusterInformer<VirtualMachineInstance>,
    events: { recordFor: () => undefined } as never,
    instancetypes: {} as never,
    // Still provisioning: the VMI waits for it.
    dataVolumes: { ensure: async () => (ensures++, [undefined]) } as never,
    dataVolumeEvents: { onChange: (h: (dv: DataVolume) => void) => void (dvHandler = h) } as never,
    log: pino({ level: 'silent' }),
  });
  controller.start();
  await until(() => ensures >= 1);
  // Nothing polls: longer than the old 2 s recheck leaves it at one sync.
  await forMs(2_500);
  const quiet = ensures;
  const dv = (owner: string): DataVolume => ({
    apiVersion: 'cdi.kubevirt.io/v1beta1',
    kind: 'DataVolume',
    metadata: {
      name: 'root',
      namespace: 'ns',
      ownerReferences: [{ apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: owner, uid: 'u', controller: true }],
    },
    spec: { source: { blank: {} } },
  });
  dvHandler(dv('other-vm'));
  dvHandler(dv('vm'));
  await until(() => ensures > quiet);
  await forMs(200);
  controller.stop();
  t.same({ quiet, woken: ensures - quiet }, { quiet: 1, woken: 1 }, 'one sync at start, one more for its DataVolume, none polled');
});
