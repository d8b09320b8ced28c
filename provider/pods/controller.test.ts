import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';
import { ImagePullError } from '../images/errors.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { VmiSource } from './vmi-source.js';
import {
  FAKE_ATTACH_CPU_MS,
  FAKE_LAUNCHER_CPU_MS,
  podControllerEnv,
  vmPod,
  type PodControllerEnv,
} from '../../test/helpers/pod-controller.js';

/** The part of a pod's status the tests look at. */
function summary(pod: V1Pod | undefined) {
  const c = pod?.status?.containerStatuses?.[0];
  return {
    phase: pod?.status?.phase,
    state: Object.keys(c?.state ?? {})[0],
    reason: c?.state?.waiting?.reason ?? c?.state?.terminated?.reason ?? pod?.status?.reason,
    restartCount: c?.restartCount,
  };
}

const statusOf = (env: PodControllerEnv, name: string) => summary(env.pods.get(`ns/${name}`));
const waitingMessage = (env: PodControllerEnv, name: string) =>
  env.pods.get(`ns/${name}`)?.status?.containerStatuses?.[0]?.state?.waiting?.message;
const missingImage = () =>
  new SpecError([{ path: 'disks[0].source', reason: 'FieldValueNotFound', message: '/images/disk.qcow2 does not exist' }]);
const touch = (env: PodControllerEnv, name: string, n: number) =>
  env.pods.update(`ns/${name}`, (p) => ({
    ...p,
    metadata: { ...p.metadata, annotations: { ...p.metadata?.annotations, touched: String(n) } },
  }));

/** Waits until `ready` holds, letting promises run; the fakes never wait on time. */
async function until(ready: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !ready(); i++) await new Promise((r) => setImmediate(r));
}

t.test(
  'a stopped VM restarts after a back-off of 10 s doubling to 5 min, shown as CrashLoopBackOff; a 10-minute run resets it',
  async (t) => {
    const env = await podControllerEnv(t);
    env.pods.put(vmPod('vm'));
    await env.settle();
    const rounds = [];
    for (const delayS of [10, 20, 40, 80, 160, 300, 300]) {
      env.launchers.powerOff('uid-vm');
      await env.settle();
      const stopped = { ...statusOf(env, 'vm'), message: waitingMessage(env, 'vm') };
      await env.advance(delayS * 1000 - 1);
      const justBefore = statusOf(env, 'vm').reason;
      await env.advance(1);
      rounds.push({ stopped, justBefore, after: statusOf(env, 'vm') });
    }
    await env.advance(600_001);
    env.launchers.powerOff('uid-vm');
    await env.settle();
    const afterLongRun = waitingMessage(env, 'vm');
    const expected = [10, 20, 40, 80, 160, 300, 300].map((s, i) => ({
      stopped: {
        phase: i ? 'Running' : 'Pending',
        state: 'waiting',
        reason: 'CrashLoopBackOff',
        restartCount: i,
        message: `back-off ${s}s restarting stopped VM`,
      },
      justBefore: 'CrashLoopBackOff',
      after: { phase: 'Running', state: 'running', restartCount: i + 1 },
    }));
    t.match(
      { rounds, afterLongRun },
      { rounds: expected, afterLongRun: 'back-off 10s restarting stopped VM' },
      'each restart waits out a doubled back-off, capped; a long run starts it over',
    );
    t.ok(
      env.events.some((e) => e.reason === 'BackOff' && e.message === 'Back-off 10s restarting stopped VM (GuestShutdown)'),
      'a BackOff event names the delay and why the VM stopped',
    );
  },
);

t.test(
  'a missing image shows ErrImagePull, then ImagePullBackOff, and is pulled again only when its back-off is over, however often the pod changes',
  async (t) => {
    const env = await podControllerEnv(t);
    env.launchers.onSync = async () => {
      throw missingImage();
    };
    const look = () => ({
      reason: statusOf(env, 'img').reason,
      starts: env.launchers.starts.get('uid-img'),
      launcher: env.launchers.get('uid-img')?.live,
    });
    env.pods.put(vmPod('img'));
    await env.settle();
    const timeline = [look()];
    for (let i = 0; i < 3; i++) touch(env, 'img', i);
    await env.settle();
    await env.advance(9_999);
    timeline.push(look());
    await env.advance(1);
    timeline.push(look());
    touch(env, 'img', 3);
    await env.advance(19_999);
    timeline.push(look());
    env.launchers.onSync = async () => {};
    await env.advance(1);
    timeline.push({ ...look(), launcher: env.launchers.running('uid-img') });
    t.same(
      timeline,
      [
        { reason: 'ErrImagePull', starts: 1, launcher: undefined },
        { reason: 'ErrImagePull', starts: 1, launcher: undefined },
        { reason: 'ImagePullBackOff', starts: 2, launcher: undefined },
        { reason: 'ImagePullBackOff', starts: 2, launcher: undefined },
        { reason: undefined, starts: 3, launcher: true },
      ],
      'pulled at 0 s, 10 s and 30 s only; nothing of a failed pull stays; the image found, the VM runs',
    );
    t.match(
      env.events.find((e) => e.reason === 'Failed'),
      { type: 'Warning', message: /Failed to prepare boot image "\/images\/disk.qcow2": .*does not exist/ },
      'a Failed event names the image',
    );
  },
);

t.test(
  'a start that fails (the node out of disk) shows CreateContainerError and is tried again only when its back-off is over, however often the pod changes',
  async (t) => {
    const env = await podControllerEnv(t);
    env.launchers.onSync = async () => {
      throw new Error("ENOSPC: no space left on device, write '/var/lib/vkvm/vms/uid-full/launcher.json'");
    };
    const look = () => ({ reason: statusOf(env, 'full').reason, starts: env.launchers.starts.get('uid-full') });
    env.pods.put(vmPod('full'));
    await env.settle();
    const timeline = [look()];
    for (let i = 0; i < 3; i++) touch(env, 'full', i);
    await env.settle();
    await env.advance(9_999);
    timeline.push(look());
    await env.advance(1);
    timeline.push(look());
    touch(env, 'full', 3);
    await env.advance(19_999);
    timeline.push(look());
    env.launchers.onSync = async () => {};
    await env.advance(1);
    timeline.push(look());
    t.same(
      timeline,
      [
        { reason: 'CreateContainerError', starts: 1 },
        { reason: 'CreateContainerError', starts: 1 },
        { reason: 'CreateContainerError', starts: 2 },
        { reason: 'CreateContainerError', starts: 2 },
        { reason: undefined, starts: 3 },
      ],
      'started at 0 s, 10 s and 30 s only; once there is room, the VM runs',
    );
    t.match(
      { message: waitingMessage(env, 'full') ?? '', event: env.events.find((e) => e.reason === 'Failed') },
      { message: '', event: { type: 'Warning', message: /^Failed to start VM: ENOSPC: no space left on device/ } },
      'while it failed, the waiting message and a Failed event said why (the message is gone now that it runs)',
    );
  },
);

t.test(
  "registry pulls: the pull's reason (ErrImageNeverPull stays, ErrImagePull backs off), then the VM runs the pulled files and shows the image's digest",
  async (t) => {
    const unauthorized = new ImagePullError(
      'ErrImagePull',
      'Failed to pull image "quay.io/a/disk:v1": unauthorized: quay.io requires authentication',
    );
    const never = new ImagePullError('ErrImageNeverPull', 'Container image "quay.io/a/disk:v1" is not present with pull policy of Never');
    let failure: ImagePullError | undefined = unauthorized;
    const sent: VmSpec[] = [];
    const images = {
      resolve: async (_pod: V1Pod, spec: VmSpec) => {
        if (failure) throw failure;
        const disks = spec.disks.map((d) => ({
          ...d,
          source: { kind: 'image' as const, path: '/store/files/abc/disk', fromImageStore: true },
        }));
        return { spec: { ...spec, disks }, fromRegistry: true, imageID: 'quay.io/a/disk@sha256:abc' };
      },
      resolveRunning: async (spec: VmSpec) => spec,
    };
    const env = await podControllerEnv(t, undefined, undefined, images);
    env.launchers.onSync = async (spec) => void sent.push(spec);
    const pod = vmPod('reg');
    pod.spec!.containers[0]!.image = 'quay.io/a/disk:v1';
    env.pods.put(pod);
    await env.settle();
    const look = () => ({ reason: statusOf(env, 'reg').reason, message: waitingMessage(env, 'reg') });
    const timeline = [look()];
    await env.advance(10_000);
    timeline.push(look());
    failure = never;
    await env.advance(20_000);
    timeline.push(look());
    failure = undefined;
    await env.advance(40_000);
    t.same(timeline, [
      { reason: 'ErrImagePull', message: unauthorized.message },
      { reason: 'ImagePullBackOff', message: unauthorized.message },
      { reason: 'ErrImageNeverPull', message: never.message },
    ]);
    t.match(
      env.pods.get('ns/reg')?.status?.containerStatuses?.[0],
      { imageID: 'quay.io/a/disk@sha256:abc', state: { running: {} } },
      'running, imageID the digest',
    );
    t.match(
      sent,
      [{ disks: [{ source: { kind: 'image', path: '/store/files/abc/disk', fromImageStore: true } }] }],
      "the launcher got the store's file",
    );
    t.same(
      env.events.filter((e) => e.reason === 'Failed').map((e) => e.message),
      [unauthorized.message, unauthorized.message, never.message],
      'each failure an event in the pull’s words',
    );
    t.notOk(
      env.events.some((e) => e.message.startsWith('Preparing boot image')),
      'a registry pull records its own Pulling/Pulled events',
    );
  },
);

t.test(
  'a pod deleted while its VM is being prepared: the VM is removed, the pod deleted with its UID as precondition, and nothing restarts it',
  async (t) => {
    const env = await podControllerEnv(t);
    let release!: () => void;
    env.launchers.onSync = () => new Promise((r) => (release = r));
    env.pods.put(vmPod('doomed'));
    await until(() => env.launchers.starts.get('uid-doomed') === 1);
    env.pods.update('ns/doomed', (p) => ({
      ...p,
      metadata: { ...p.metadata, deletionTimestamp: new Date(env.clock.now()), deletionGracePeriodSeconds: 30 },
    }));
    release();
    await env.settle();
    await env.advance(600_000);
    t.same(
      {
        launcher: env.launchers.get('uid-doomed'),
        removed: env.launchers.removed,
        deleted: env.pods.deleted,
        pod: env.pods.get('ns/doomed'),
        starts: env.launchers.starts.get('uid-doomed'),
      },
      {
        launcher: undefined,
        removed: ['uid-doomed'],
        deleted: [{ namespace: 'ns', name: 'doomed', uid: 'uid-doomed' }],
        pod: undefined,
        starts: 1,
      },
    );
  },
);

t.test(
  'after an agent restart a running launcher is re-attached, not restarted; the restart count comes from the pod status',
  async (t) => {
    const startedAt = new Date(Date.UTC(2026, 9, 31));
    const env = await podControllerEnv(t, ({ pods, launchers }) => {
      const pod = vmPod('kept');
      pod.status = {
        phase: 'Running',
        containerStatuses: [
          {
            name: 'vm',
            image: '/images/disk.qcow2',
            imageID: '',
            ready: true,
            restartCount: 3,
            state: { running: { startedAt } },
            lastState: { terminated: { exitCode: 0, reason: 'Completed', finishedAt: startedAt } },
          },
        ],
      };
      pods.put(pod);
      launchers.leaveRunning('uid-kept', startedAt.getTime());
    });
    t.match(
      {
        starts: env.launchers.starts.get('uid-kept'),
        running: env.launchers.running('uid-kept'),
        eventReasons: env.events.map((e) => e.reason).join(),
        status: env.pods.get('ns/kept')?.status,
      },
      {
        starts: undefined,
        running: true,
        eventReasons: '',
        status: {
          phase: 'Running',
          containerStatuses: [
            { ready: true, restartCount: 3, state: { running: { startedAt } }, lastState: { terminated: { reason: 'Completed' } } },
          ],
        },
      },
    );
  },
);

t.test(
  'the orphan sweep removes launchers whose pod UID is not in the synced cache, at start-up and later; a pod’s own stays',
  async (t) => {
    const env = await podControllerEnv(t, ({ pods, launchers }) => {
      pods.put(vmPod('owner'));
      launchers.leaveRunning('uid-owner');
      launchers.leaveRunning('uid-gone-while-down');
    });
    const atStart = { launchers: env.launchers.uids(), removed: [...env.launchers.removed] };
    env.launchers.leaveRunning('uid-unreachable-at-start');
    await env.advance(30_000);
    t.same(
      { atStart, later: { launchers: env.launchers.uids(), removed: env.launchers.removed } },
      {
        atStart: { launchers: ['uid-owner'], removed: ['uid-gone-while-down'] },
        later: { launchers: ['uid-owner'], removed: ['uid-gone-while-down', 'uid-unreachable-at-start'] },
      },
    );
  },
);

t.test(
  'restartPolicy: Never leaves a powered-off VM Succeeded; OnFailure restarts a crash and a dead launcher, not a power-off',
  async (t) => {
    const env = await podControllerEnv(t);
    env.pods.put(vmPod('never', { restartPolicy: 'Never' }));
    env.pods.put(vmPod('off', { restartPolicy: 'OnFailure' }));
    env.pods.put(vmPod('crash', { restartPolicy: 'OnFailure' }));
    env.pods.put(vmPod('killed', { restartPolicy: 'OnFailure' }));
    await env.settle();
    env.launchers.powerOff('uid-never');
    env.launchers.powerOff('uid-off');
    env.launchers.crash('uid-crash');
    env.launchers.kill('uid-killed');
    await env.settle();
    const stopped = {
      never: statusOf(env, 'never'),
      off: statusOf(env, 'off'),
      crash: statusOf(env, 'crash'),
      killed: statusOf(env, 'killed'),
    };
    await env.advance(10_000);
    const names = ['never', 'off', 'crash', 'killed'];
    t.same(
      { stopped, later: Object.fromEntries(names.map((n) => [n, { ...statusOf(env, n), starts: env.launchers.starts.get(`uid-${n}`) }])) },
      {
        stopped: {
          never: { phase: 'Succeeded', state: 'terminated', reason: 'Completed', restartCount: 0 },
          off: { phase: 'Succeeded', state: 'terminated', reason: 'Completed', restartCount: 0 },
          crash: { phase: 'Pending', state: 'waiting', reason: 'CrashLoopBackOff', restartCount: 0 },
          killed: { phase: 'Pending', state: 'waiting', reason: 'CrashLoopBackOff', restartCount: 0 },
        },
        later: {
          never: { phase: 'Succeeded', state: 'terminated', reason: 'Completed', restartCount: 0, starts: 1 },
          off: { phase: 'Succeeded', state: 'terminated', reason: 'Completed', restartCount: 0, starts: 1 },
          crash: { phase: 'Running', state: 'running', reason: undefined, restartCount: 1, starts: 2 },
          killed: { phase: 'Running', state: 'running', reason: undefined, restartCount: 1, starts: 2 },
        },
      },
    );
  },
);

t.test('a pod vkvm cannot realize fails with InvalidVMSpec and an event naming the field; nothing starts', async (t) => {
  const env = await podControllerEnv(t);
  env.pods.put(vmPod('tiny', { memory: '16Mi' }));
  await env.settle();
  const field = /spec\.containers\[0\]\.resources\.limits\.memory/;
  t.match(
    { status: env.pods.get('ns/tiny')?.status, events: env.events, starts: env.launchers.starts.get('uid-tiny') },
    {
      status: {
        phase: 'Failed',
        reason: 'InvalidVMSpec',
        message: field,
        containerStatuses: [{ state: { waiting: { reason: 'InvalidVMSpec', message: field } } }],
      },
      events: [{ object: 'Pod/tiny', type: 'Warning', reason: 'Failed', message: field }],
      starts: undefined,
    },
  );
});

t.test(
  'a launcher pod and its VMI are written from one look at the lifecycle: a VMI found invalid during a status write still ends Failed with the pod',
  async (t) => {
    const vmi: VirtualMachineInstance = {
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachineInstance',
      metadata: { name: 'testvm', namespace: 'ns', uid: 'vmi-uid' },
      spec: { domain: { devices: {} } },
      status: { phase: 'Scheduled' },
    };
    let reading!: () => void;
    let released = false;
    const readGate = new Promise<void>((r) => (reading = r));
    const vmis: VmiSource = {
      onChange: () => {},
      follow: () => {},
      stop: async () => {},
      specFor: async () =>
        new SpecError([{ path: 'spec.volumes[0].hostDisk.path', reason: 'FieldValueInvalid', message: 'must be absolute' }]),
      // The first status write waits inside its VMI read until the pod sync has found the VMI invalid.
      read: async () => {
        if (!released) await readGate;
        return vmi;
      },
    };
    const env = await podControllerEnv(t, undefined, vmis);
    const pod = vmPod('virt-launcher-testvm');
    pod.metadata!.ownerReferences = [
      { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', name: 'testvm', uid: 'vmi-uid', controller: true },
    ];
    env.pods.put(pod);
    await until(() => env.events.some((e) => e.reason === 'SyncFailed'));
    released = true;
    reading();
    await env.settle();
    t.match(
      {
        vmi: env.pods.vmiStatusWrites.at(-1),
        pod: env.pods.get('ns/virt-launcher-testvm')?.status,
        events: env.events.map((e) => `${e.object} ${e.reason}`),
      },
      {
        vmi: {
          metadata: { uid: 'vmi-uid' },
          status: {
            phase: 'Failed',
            reason: 'InvalidVMSpec',
            conditions: [
              { type: 'Ready', status: 'False' },
              { type: 'Synchronized', status: 'False', reason: 'InvalidVMSpec', message: /hostDisk\.path/ },
            ],
          },
        },
        pod: { phase: 'Failed', reason: 'InvalidVMSpec' },
        events: ['Pod/virt-launcher-testvm Failed', 'VirtualMachineInstance/testvm SyncFailed'],
      },
    );
  },
);

t.test(
  'a VM start is charged its launcher’s CPU and its first network attach’s host commands; a restart only its launcher’s',
  async (t) => {
    const env = await podControllerEnv(t);
    const charged = async () => {
      const h = (await env.metrics.cpuMsPerVmStart.get()).values;
      return {
        count: h.find((v) => v.metricName === 'vkvm_cpu_ms_per_vm_start_count')?.value,
        sum: h.find((v) => v.metricName === 'vkvm_cpu_ms_per_vm_start_sum')?.value,
      };
    };
    env.pods.put(vmPod('charged'));
    await env.settle();
    const first = await charged();
    touch(env, 'charged', 1);
    await env.settle();
    const resynced = await charged();
    env.launchers.powerOff('uid-charged');
    await env.settle();
    await env.advance(10_000);
    t.same(
      { first, resynced, restarted: await charged(), starts: env.launchers.starts.get('uid-charged') },
      {
        first: { count: 1, sum: FAKE_LAUNCHER_CPU_MS + FAKE_ATTACH_CPU_MS },
        resynced: { count: 1, sum: FAKE_LAUNCHER_CPU_MS + FAKE_ATTACH_CPU_MS },
        restarted: { count: 2, sum: 2 * FAKE_LAUNCHER_CPU_MS + FAKE_ATTACH_CPU_MS },
        starts: 2,
      },
    );
  },
);

t.test('the pod’s CPU request reaches its launcher in the VM spec, none as 0', async (t) => {
  const env = await podControllerEnv(t);
  const synced = new Map<string, VmSpec['cpu']>();
  env.launchers.onSync = async (spec) => void synced.set(spec.uid, spec.cpu);
  const requesting = vmPod('requesting');
  requesting.spec!.containers[0]!.resources!.requests = { cpu: '250m', memory: '256Mi' };
  env.pods.put(requesting);
  env.pods.put(vmPod('none'));
  await env.settle();
  t.match(
    { requesting: synced.get('uid-requesting'), none: synced.get('uid-none') },
    { requesting: { requestMillicores: 250 }, none: { requestMillicores: 0 } },
  );
});
