import t from 'tap';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { fitRefusal, podRequests } from './fit.js';
import { admittedPods, byCreationTime, judgeAdmission } from './node-admission.js';
import { newLifecycle, type PodLifecycle } from './lifecycle.js';

const Mi = 2 ** 20;
const NODE = { cpu: '2', memory: '1Gi', 'ephemeral-storage': '10Gi', pods: '3' };

function container(name: string, requests?: Record<string, string>, restartPolicy?: string): V1Container {
  return { name, image: 'x', ...(requests ? { resources: { requests } } : {}), ...(restartPolicy ? { restartPolicy } : {}) };
}

function pod(name: string, requests?: Record<string, string>, extra: Partial<V1Pod['spec']> = {}): V1Pod {
  return { metadata: { name, namespace: 'ns', uid: `uid-${name}` }, spec: { containers: [container('vm', requests)], ...extra } };
}

t.test("a pod's requests are counted as the scheduler counts them", async (t) => {
  const of = (p: V1Pod) => Object.fromEntries(podRequests(p));
  t.same(
    {
      none: of(pod('none')),
      sum: of({ ...pod('two'), spec: { containers: [container('a', { cpu: '100m', memory: '64Mi' }), container('b', { cpu: '0.25' })] } }),
      // The largest init container wins over a smaller sum of containers.
      initMax: of(
        pod(
          'init',
          { cpu: '100m', memory: '64Mi' },
          { initContainers: [container('i1', { memory: '512Mi' }), container('i2', { cpu: '1' })] },
        ),
      ),
      // A sidecar runs beside the containers and beside the init containers after it.
      sidecar: of(
        pod(
          'side',
          { memory: '100Mi' },
          { initContainers: [container('s', { memory: '50Mi' }, 'Always'), container('i', { memory: '120Mi' })] },
        ),
      ),
      overhead: of(pod('overhead', { memory: '100Mi' }, { overhead: { memory: '20Mi', cpu: '250m' } })),
      podLevel: of(pod('pod-level', { memory: '100Mi', cpu: '1' }, { resources: { requests: { memory: '300Mi' } } })),
    },
    {
      none: {},
      sum: { cpu: 350, memory: 64 * Mi },
      initMax: { cpu: 1000, memory: 512 * Mi },
      sidecar: { memory: 170 * Mi },
      overhead: { memory: 120 * Mi, cpu: 250 },
      podLevel: { memory: 300 * Mi, cpu: 1000 },
    },
    'containers summed, init containers by the max rule (sidecars included), pod-level requests first, overhead added, cpu in millicores, none is zero',
  );
});

t.test('a pod fits beside the admitted pods, or is refused with the kubelet reason and message', async (t) => {
  const half = pod('half', { cpu: '1', memory: '512Mi' });
  const cases: Record<string, [V1Pod, V1Pod[]]> = {
    fits: [pod('p', { cpu: '1', memory: '512Mi' }), [half]],
    noRequests: [pod('p'), [half, pod('big', { cpu: '1', memory: '512Mi' })]],
    memoryOver: [pod('p', { memory: '513Mi' }), [half]],
    cpuOver: [pod('p', { cpu: '1001m' }), [half]],
    // cpu first, as the scheduler checks it first and the kubelet reports the first failure.
    bothOver: [pod('p', { cpu: '3', memory: '2Gi' }), []],
    podsOver: [pod('p'), [pod('a'), pod('b'), pod('c')]],
    initMaxOver: [pod('p', { memory: '1Mi' }, { initContainers: [container('i', { memory: '600Mi' })] }), [half]],
    ephemeralOver: [pod('p', { 'ephemeral-storage': '11Gi' }), []],
    // An extended resource the node does not list is not the node's to judge; one it lists is.
    unlistedDevice: [pod('p', { 'example.com/gpu': '1' }), []],
    listedDevice: [pod('p', { 'devices.kubevirt.io/kvm': '2' }), []],
  };
  const results = Object.fromEntries(
    Object.entries(cases).map(([name, [p, admitted]]) => [
      name,
      fitRefusal(p, admitted, name === 'listedDevice' ? { ...NODE, 'devices.kubevirt.io/kvm': '1' } : NODE) ?? 'fits',
    ]),
  );
  const refusal = (resource: string, requested: number, used: number, capacity: number) => ({
    reason: `OutOf${resource}`,
    message: `Node didn't have enough resource: ${resource}, requested: ${requested}, used: ${used}, capacity: ${capacity}`,
  });
  t.same(
    results,
    {
      fits: 'fits',
      noRequests: 'fits',
      memoryOver: refusal('memory', 513 * Mi, 512 * Mi, 1024 * Mi),
      cpuOver: refusal('cpu', 1001, 1000, 2000),
      bothOver: refusal('cpu', 3000, 0, 2000),
      podsOver: refusal('pods', 1, 3, 3),
      initMaxOver: refusal('memory', 600 * Mi, 512 * Mi, 1024 * Mi),
      ephemeralOver: refusal('ephemeral-storage', 11 * 1024 * Mi, 0, 10 * 1024 * Mi),
      unlistedDevice: 'fits',
      listedDevice: refusal('devices.kubevirt.io/kvm', 2, 0, 1),
    },
    "the first resource short, by the scheduler's order, in the kubelet's words and units",
  );
});

t.test('admission: pressure first, then the fit, in the words of the kubelet’s rejectPod', async (t) => {
  const big = pod('big', { memory: '2Gi' });
  t.same(
    {
      pressure: judgeAdmission(big, { pressure: ['DiskPressure'], allocatable: NODE, admitted: [] }),
      fit: judgeAdmission(big, { pressure: [], allocatable: NODE, admitted: [] }),
      noAllocatable: judgeAdmission(big, { pressure: [], admitted: [] }),
    },
    {
      pressure: { reason: 'Evicted', message: 'Pod was rejected: The node had condition: [DiskPressure]. ' },
      fit: {
        reason: 'OutOfmemory',
        message: `Pod was rejected: Node didn't have enough resource: memory, requested: ${2048 * Mi}, used: 0, capacity: ${1024 * Mi}`,
      },
      noAllocatable: undefined,
    },
    'Evicted under pressure, OutOfmemory short of memory, nothing judged without an allocatable',
  );
});

t.test('the admitted pods that hold a share: admitted and not terminal', async (t) => {
  const pods = new Map<string, V1Pod>();
  const lifecycles: PodLifecycle[] = [];
  const add = (name: string, lc: (l: PodLifecycle) => PodLifecycle, phase?: string) => {
    const p = pod(name, { memory: '1Mi' });
    if (phase) p.status = { phase };
    pods.set(`ns/${name}`, p);
    lifecycles.push(lc(newLifecycle(p)));
  };
  add('running', (l) => ({ ...l, admitted: true, state: { kind: 'Running' } }));
  add('backing-off', (l) => ({ ...l, admitted: true, state: { kind: 'BackingOff', untilMs: 1, delayMs: 1 } }));
  add('deleting', (l) => ({ ...l, admitted: true, state: { kind: 'Terminating', was: { kind: 'Running' } } }));
  add('not-yet', (l) => ({ ...l, admitted: false }));
  add('finished', (l) => ({ ...l, admitted: true, state: { kind: 'Finished' } }));
  add('refused', (l) => ({ ...l, admitted: false, state: { kind: 'Evicted', message: 'x', reason: 'OutOfcpu' } }));
  add('evicted', (l) => ({ ...l, admitted: true, state: { kind: 'Evicted', message: 'x' } }));
  add('invalid', (l) => ({ ...l, admitted: true, state: { kind: 'Invalid', message: 'x', found: 'start' } }));
  add('failed-in-api', (l) => ({ ...l, admitted: true }), 'Failed');
  add('self', (l) => ({ ...l, admitted: true }));
  t.same(
    admittedPods(lifecycles, (key) => pods.get(key), 'uid-self').map((p) => p.metadata?.name),
    ['running', 'backing-off', 'deleting'],
    'terminal pods, pods refused or not admitted yet, and the judged pod itself hold nothing',
  );
});

t.test('pods are re-admitted oldest first', async (t) => {
  const at = (name: string, iso: string): V1Pod => ({ metadata: { name, creationTimestamp: new Date(iso) } });
  t.same(
    byCreationTime([at('c', '2026-01-02T00:00:00Z'), at('b', '2026-01-01T00:00:00Z'), at('a', '2026-01-02T00:00:00Z')]).map(
      (p) => p.metadata?.name,
    ),
    ['b', 'a', 'c'],
    'by creation time, then by name',
  );
});
