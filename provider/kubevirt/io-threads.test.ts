// A VMI's iothreads and virtio-blk queues through translateVmi, checked against what KubeVirt's converter gives
// the same VMI (pkg/virt-launcher/virtwrap/converter: iothreads.GetIOThreadsCountType, assignDiskIOThread).
import t from 'tap';
import { SpecError } from '../../vmm/errors.js';
import { translateVmi } from './translate.js';
import type { Disk, DomainSpec, VirtualMachineInstance } from './types.js';

/** A VMI with `disks` (each backed by an emptyDisk of its name) and domain fields over 1 GiB of memory. */
function vmi(disks: Disk[], domain: Partial<DomainSpec> = {}): VirtualMachineInstance {
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstance',
    metadata: { name: 'io', namespace: 'default', uid: '6a1e2c3d-4b5f-4a6b-8c7d-9e0f1a2b3c4d' },
    spec: {
      domain: { resources: { requests: { memory: '1Gi' } }, ...domain, devices: { disks, ...domain.devices } },
      volumes: disks.map((d) => ({ name: d.name, emptyDisk: { capacity: '1Gi' } })),
    },
  };
}
const virtio = (name: string, more: Partial<Disk> = {}): Disk => ({ name, disk: { bus: 'virtio' }, ...more });
const ctx = { secrets: {}, pvcs: {} };

/** The VM's iothread count and each disk's [name, iothread, queues], or the causes. */
function threadsOf(v: VirtualMachineInstance) {
  const r = translateVmi(v, ctx);
  if (r instanceof SpecError) return r.causes.map((c) => [c.path, c.reason, c.message]);
  return { ioThreads: r.spec.ioThreads, disks: r.spec.disks.map((d) => [d.name, d.ioThread, d.queues]), unsupported: r.unsupported };
}

t.test('shared: one iothread for every virtio disk; none is the default', async (t) => {
  t.same(threadsOf(vmi([virtio('a'), virtio('b')], { ioThreadsPolicy: 'shared' })), {
    ioThreads: 1,
    disks: [
      ['a', 1, undefined],
      ['b', 1, undefined],
    ],
    unsupported: [],
  });
  t.same(
    threadsOf(vmi([virtio('a')])),
    { ioThreads: undefined, disks: [['a', undefined, undefined]], unsupported: [] },
    'no policy and no dedicated disk: no iothreads, as in KubeVirt',
  );
});

t.test('auto: a pool of two per requested CPU, disks in turn; a dedicated disk gets a thread after the pool', async (t) => {
  const disks = [virtio('a'), virtio('b', { dedicatedIOThread: true }), virtio('c'), virtio('d'), virtio('e')];
  // 1 CPU (500m rounds up): pool limit 2; 4 pool disks and 1 dedicated exceed it, so the pool is max(1, 2 - 1) = 1.
  t.same(threadsOf(vmi(disks, { ioThreadsPolicy: 'auto', resources: { requests: { memory: '1Gi', cpu: '500m' } } })), {
    ioThreads: 2,
    disks: [
      ['a', 1, undefined],
      ['b', 2, undefined],
      ['c', 1, undefined],
      ['d', 1, undefined],
      ['e', 1, undefined],
    ],
    unsupported: [],
  });
  // 2 CPUs: pool limit 4, but 4 + 1 disks exceed it, so the pool is 3: a, c, d on 1..3, e back on 1; b on 4.
  t.same(
    threadsOf(vmi(disks, { ioThreadsPolicy: 'auto', resources: { requests: { memory: '1Gi' }, limits: { cpu: '2' } } })),
    {
      ioThreads: 4,
      disks: [
        ['a', 1, undefined],
        ['b', 4, undefined],
        ['c', 2, undefined],
        ['d', 3, undefined],
        ['e', 1, undefined],
      ],
      unsupported: [],
    },
    'limits.cpu sizes the pool when there is no request',
  );
});

t.test('dedicatedIOThread alone gives the disk its own thread; SATA disks count but get none', async (t) => {
  const disks: Disk[] = [
    virtio('a', { dedicatedIOThread: true }),
    { name: 's', disk: { bus: 'sata' }, dedicatedIOThread: true },
    virtio('b', { dedicatedIOThread: true }),
  ];
  // Three dedicated over a shared limit of 1: the pool keeps one thread, the dedicated ones are 2..4, and (as in
  // KubeVirt) the SATA disk's is declared but unused: b takes the next, 3.
  t.same(threadsOf(vmi(disks)), {
    ioThreads: 4,
    disks: [
      ['a', 2, undefined],
      ['s', undefined, undefined],
      ['b', 3, undefined],
    ],
    unsupported: ['spec.domain.devices.disks[1].dedicatedIOThread'],
  });
});

t.test('blockMultiQueue: a queue per vCPU on every virtio disk', async (t) => {
  const disks: Disk[] = [virtio('a'), { name: 's', disk: { bus: 'sata' } }];
  t.same(threadsOf(vmi(disks, { cpu: { sockets: 2, cores: 2 }, devices: { blockMultiQueue: true } })), {
    ioThreads: undefined,
    disks: [
      ['a', undefined, 4],
      ['s', undefined, undefined],
    ],
    unsupported: [],
  });
});

t.test('a value vkvm cannot run is refused, naming its field', async (t) => {
  t.same(threadsOf(vmi([virtio('a')], { ioThreadsPolicy: 'dedicated' })), [
    [
      'spec.domain.ioThreadsPolicy',
      'FieldValueInvalid',
      'Invalid IOThreadsPolicy ("dedicated"): must be one of shared, auto, supplementalPool',
    ],
  ]);
  t.match(
    threadsOf(vmi([virtio('a')], { ioThreadsPolicy: 'supplementalPool' })),
    [['spec.domain.ioThreadsPolicy', 'FieldValueNotSupported', /supplementalPool needs libvirt 10 and QEMU 9/]],
    'supplementalPool is refused rather than run as another policy',
  );
  t.same(threadsOf(vmi([virtio('a', { dedicatedIOThread: 'yes' as never })], { devices: { blockMultiQueue: 1 as never } })), [
    ['spec.domain.devices.blockMultiQueue', 'FieldValueInvalid', 'spec.domain.devices.blockMultiQueue must be true or false, not 1'],
    [
      'spec.domain.devices.disks[0].dedicatedIOThread',
      'FieldValueInvalid',
      'spec.domain.devices.disks[0].dedicatedIOThread must be true or false, not "yes"',
    ],
  ]);
});

t.test("vmm's causes on iothreads and queues name the VMI's fields", async (t) => {
  const r = translateVmi(vmi([virtio('a', { dedicatedIOThread: true })]), ctx);
  if (r instanceof SpecError) throw r;
  t.same(
    r.atKubevirtFields([
      { path: 'ioThreads', reason: 'FieldValueInvalid', message: 'm' },
      { path: 'disks[0].ioThread', reason: 'FieldValueInvalid', message: 'm' },
      { path: 'disks[0].queues', reason: 'FieldValueInvalid', message: 'm' },
    ]),
    [
      { path: 'spec.domain.ioThreadsPolicy', reason: 'FieldValueInvalid', message: 'm' },
      { path: 'spec.domain.devices.disks[0].dedicatedIOThread', reason: 'FieldValueInvalid', message: 'm' },
      { path: 'spec.domain.devices.blockMultiQueue', reason: 'FieldValueInvalid', message: 'm' },
    ],
  );
});
