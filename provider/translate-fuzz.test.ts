// Property: whatever a tenant writes into a pod or a VMI, translation yields
// a VM spec or a SpecError whose causes name fields; it never throws. Inputs
// mix well-formed shapes with values of the wrong type where the API server
// would let them through (unknown fields are preserved in the VMI CRD).
import fc from 'fast-check';
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { SpecError } from '../vmm/errors.js';
import type { VmSpec } from '../vmm/spec.js';
import { TEST_GUEST_IMAGE } from './images/test-guest-images.js';
import { translateVmi } from './kubevirt/translate.js';
import type { VirtualMachineInstance } from './kubevirt/types.js';
import { translatePod } from './pods/translate.js';

const RUNS = 400;

const text = fc.oneof(
  fc.string(),
  fc.constantFrom(
    '',
    '/etc/shadow',
    '../x',
    'kernel:/boot/vmlinuz',
    'file:///etc/passwd',
    'http://127.0.0.1/',
    TEST_GUEST_IMAGE,
    'quay.io/containerdisks/fedora',
  ),
);
const quantity = fc.oneof(fc.constantFrom('64Mi', '1Gi', '0', '-1', '16Mi', 'lots', '1e3', '100m', '2', ''), fc.string());
/** A value of any type, where the schema expects one. */
const anything = fc.anything({ maxDepth: 2 });
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });

const resources = fc.record(
  {
    requests: maybe(fc.dictionary(fc.constantFrom('cpu', 'memory', 'ephemeral-storage'), quantity)),
    limits: maybe(fc.dictionary(fc.constantFrom('cpu', 'memory'), quantity)),
  },
  { requiredKeys: [] },
);

const pod = fc.record({
  metadata: fc.record(
    {
      name: text,
      namespace: text,
      uid: fc.oneof(fc.uuid(), fc.string()),
      annotations: maybe(
        fc.dictionary(
          fc.constantFrom(
            'vkvm.io/user-data',
            'vkvm.io/initrd',
            'vkvm.io/kernel-cmdline',
            'vkvm.io/machine-type',
            'vkvm.io/pod-network',
            'other',
          ),
          text,
        ),
      ),
    },
    { requiredKeys: [] },
  ),
  spec: fc.record(
    {
      restartPolicy: maybe(fc.constantFrom('Always', 'OnFailure', 'Never', 'Sometimes')),
      containers: fc.array(
        fc.record(
          {
            name: text,
            image: text,
            command: maybe(fc.array(fc.string(), { maxLength: 2 })),
            args: maybe(fc.array(fc.string(), { maxLength: 3 })),
            env: maybe(fc.array(fc.record({ name: fc.string(), value: maybe(fc.string()) }), { maxLength: 2 })),
            ports: maybe(
              fc.array(
                fc.record({ containerPort: fc.oneof(fc.integer(), anything), protocol: maybe(fc.constantFrom('TCP', 'UDP', 'SCTP', 'x')) }),
                { maxLength: 2 },
              ),
            ),
            resources: maybe(resources),
          },
          { requiredKeys: [] },
        ),
        { maxLength: 3 },
      ),
    },
    { requiredKeys: [] },
  ),
});

const bus = fc.constantFrom('virtio', 'sata', 'scsi', 'usb', 'ide', '');
const volumeName = fc.constantFrom('root', 'data', 'cloudinit', 'x');
const volume = fc.oneof(
  // fromImageStore: what a user might try in order to claim the agent's trust.
  fc.record({
    name: volumeName,
    containerDisk: fc.record(
      { image: text, path: maybe(text), imagePullPolicy: maybe(text), fromImageStore: maybe(fc.boolean()) },
      { requiredKeys: [] },
    ),
  }),
  fc.record({
    name: volumeName,
    hostDisk: fc.record(
      { path: text, type: fc.constantFrom('Disk', 'DiskOrCreate', 'Other'), capacity: maybe(quantity) },
      { requiredKeys: [] },
    ),
  }),
  fc.record({ name: volumeName, emptyDisk: fc.record({ capacity: quantity }) }),
  fc.record({
    name: volumeName,
    cloudInitNoCloud: fc.record(
      { userData: maybe(fc.string()), userDataBase64: maybe(fc.string()), secretRef: maybe(fc.record({ name: text })) },
      { requiredKeys: [] },
    ),
  }),
  fc.record({ name: volumeName, persistentVolumeClaim: fc.record({ claimName: text }, { requiredKeys: [] }) }),
  fc.record({ name: volumeName, other: anything }),
);
const disk = fc.record(
  {
    name: volumeName,
    disk: maybe(fc.record({ bus }, { requiredKeys: [] })),
    cdrom: maybe(fc.record({ bus }, { requiredKeys: [] })),
    bootOrder: maybe(fc.oneof(fc.integer(), anything)),
  },
  { requiredKeys: ['name'] },
);
const vmi = fc.record({
  apiVersion: fc.constant('kubevirt.io/v1'),
  kind: fc.constant('VirtualMachineInstance'),
  metadata: fc.record(
    { name: text, namespace: text, uid: fc.oneof(fc.uuid(), fc.string()), annotations: maybe(fc.dictionary(fc.string(), fc.string())) },
    { requiredKeys: [] },
  ),
  spec: fc.record(
    {
      domain: fc.record(
        {
          resources: maybe(resources),
          memory: maybe(fc.record({ guest: maybe(quantity) }, { requiredKeys: [] })),
          cpu: maybe(
            fc.record(
              { cores: maybe(fc.oneof(fc.integer(), anything)), sockets: maybe(fc.integer()), model: maybe(text) },
              { requiredKeys: [] },
            ),
          ),
          firmware: maybe(
            fc.record(
              { uuid: maybe(fc.oneof(fc.uuid(), fc.string())), bootloader: maybe(anything), kernelBoot: maybe(anything) },
              { requiredKeys: [] },
            ),
          ),
          clock: maybe(anything),
          devices: maybe(
            fc.record(
              { disks: maybe(fc.array(disk, { maxLength: 3 })), interfaces: maybe(fc.array(anything, { maxLength: 2 })) },
              { requiredKeys: [] },
            ),
          ),
        },
        { requiredKeys: [] },
      ),
      volumes: maybe(fc.array(volume, { maxLength: 3 })),
      networks: maybe(fc.array(anything, { maxLength: 2 })),
      hostname: maybe(text),
      architecture: maybe(text),
    },
    { requiredKeys: [] },
  ),
});

const claimsImageStore = (spec: VmSpec) =>
  spec.disks.some((d) => 'fromImageStore' in d.source) || (spec.kernelBoot !== undefined && 'fromImageStore' in spec.kernelBoot);

/**
 * The translation's outcome is a spec, or a SpecError whose every cause names
 * a field. A spec never claims a file of the image store: that marker is the
 * pull step's alone.
 */
function wellFormed(result: unknown): boolean {
  if (!(result instanceof SpecError)) return typeof result === 'object' && result !== null && !claimsImageStore(result as VmSpec);
  return (
    result.causes.length > 0 && result.causes.every((c) => typeof c.path === 'string' && c.path.length > 0 && typeof c.message === 'string')
  );
}

t.test('any pod translates to a VM spec or field-naming causes, never an exception', async (t) => {
  t.doesNotThrow(
    () =>
      fc.assert(
        fc.property(pod, (p) => wellFormed(translatePod(p as V1Pod))),
        { numRuns: RUNS },
      ),
    `${RUNS} generated pods`,
  );
});

t.test('any VMI translates to a VM spec or field-naming causes, never an exception', async (t) => {
  const ctx = {
    secrets: { init: { userdata: '#cloud-config\n' } },
    pvcs: { data: { kind: 'hostPath' as const, hostPath: '/mnt/pv', volumeMode: 'Filesystem' as const, capacity: '1Gi' } },
  };
  const property = fc.property(vmi, (v) => {
    const result = translateVmi(v as unknown as VirtualMachineInstance, ctx);
    return wellFormed(result instanceof SpecError ? result : result.spec);
  });
  // Found by the generator once (fields whose toString is not a function): kept as fixed examples.
  const badToString = { toString: '' };
  const examples: [unknown][] = [
    [{ apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: {}, spec: { domain: { cpu: { cores: badToString } } } }],
    [
      {
        apiVersion: 'kubevirt.io/v1',
        kind: 'VirtualMachineInstance',
        metadata: {},
        spec: { domain: { resources: { requests: { memory: badToString } } } },
      },
    ],
  ];
  t.doesNotThrow(() => fc.assert(property, { numRuns: RUNS, examples }), `${RUNS} generated VMIs and the examples`);
});
