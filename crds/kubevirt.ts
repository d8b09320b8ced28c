// The kubevirt.io/v1 VirtualMachine and VirtualMachineInstance CRDs vkvm
// installs: names, printer columns and subresources as KubeVirt defines them
// (pkg/virt-operator/resource/generate/components/crds.go), a schema that
// types the subset vkvm runs and preserves everything else, and CEL rules for
// the admission checks KubeVirt's webhook would otherwise make.
//
// The VMI spec schema is built once per field path and used both as the VMI's
// `spec` and as the VM's `spec.template.spec`, so the two cannot drift; only
// the paths in the messages differ.
import {
  boolean,
  enumOf,
  integer,
  list,
  object,
  opaque,
  quantity,
  resourceList,
  string,
  stringMap,
  time,
  type JsonSchema,
  type ValidationRule,
} from './schema.js';

export const GROUP = 'kubevirt.io';
export const VERSION = 'v1';

/**
 * KubeVirt's own limit on disks and volumes (arrayLenMax). It also bounds the
 * estimated cost of the CEL rules that compare every item with every other:
 * measured on Kubernetes 1.33, the unique-name rule on 256 volumes of 256-char
 * names takes about 70% of the apiserver's per-rule budget; 512 is 2.9x over.
 */
export const MAX_DEVICES = 256;
/** Bounds the cost of name comparisons in CEL; KubeVirt's maxStrLen. */
export const MAX_NAME_LENGTH = 256;

export const RUN_STRATEGIES = ['Always', 'Halted', 'Manual', 'RerunOnFailure', 'Once'];
export const DISK_BUSES = ['virtio', 'sata', 'scsi'];
/** A CD-ROM needs a bus that carries removable media: KubeVirt refuses virtio too. */
export const CDROM_BUSES = DISK_BUSES.filter((b) => b !== 'virtio');

const PRESERVED = 'Fields vkvm does not support are kept as given; the controller reports them.';

// A minimal CRD type with the wire names, so the object serialises as is.
export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string; labels: Record<string, string> };
  spec: {
    group: string;
    names: { kind: string; listKind: string; plural: string; singular: string; shortNames: string[]; categories: string[] };
    scope: 'Namespaced';
    versions: Array<{
      name: string;
      served: boolean;
      storage: boolean;
      subresources: { status: Record<string, never> };
      additionalPrinterColumns: Array<{ name: string; type: string; jsonPath: string; description?: string; priority?: number }>;
      selectableFields?: Array<{ jsonPath: string }>;
      schema: { openAPIV3Schema: JsonSchema };
    }>;
  };
}

// ---- CEL ----

/** True when `spec` (a CEL expression for a VMI spec) states how much memory the guest gets. */
function memoryGiven(spec: string): string {
  const d = `${spec}.domain`;
  return (
    `(has(${d}.memory) && has(${d}.memory.guest)) || ` +
    `(has(${d}.resources) && ((has(${d}.resources.requests) && 'memory' in ${d}.resources.requests) || ` +
    `(has(${d}.resources.limits) && 'memory' in ${d}.resources.limits)))`
  );
}

function memoryRequired(path: string, rule: string, fieldPath: string): ValidationRule {
  return {
    rule,
    message:
      `no memory requested: set ${path}.domain.resources.requests.memory ` +
      `(or ${path}.domain.resources.limits.memory or ${path}.domain.memory.guest)`,
    fieldPath,
    reason: 'FieldValueRequired',
  };
}

function uniqueNames(path: string, what: string): ValidationRule {
  return {
    rule: 'self.all(x, self.exists_one(y, y.name == x.name))',
    message: `${path}: each ${what} needs a unique name`,
  };
}

// ---- VMI spec ----

const name = (what: string) => string(`Name of the ${what}.`, { maxLength: MAX_NAME_LENGTH });
const bootOrder = (what: string) =>
  integer(`Boot priority of this ${what}, 1 first. Unique across disks and interfaces.`, { minimum: 1 });
const bus = enumOf(DISK_BUSES, 'Bus to emulate. vkvm supports virtio, sata and scsi.');
const cdromBus = enumOf(CDROM_BUSES, 'Bus to emulate. vkvm supports sata and scsi for CD-ROMs.');
const localObjectReference = object({ name: string() }, { required: ['name'] });

function diskSchema(): JsonSchema {
  return object(
    {
      name: name('disk; a volume of the same name backs it'),
      disk: object({ bus, readonly: boolean() }, { description: 'Attach as a disk.', preserveUnknown: true }),
      cdrom: object({ bus: cdromBus, readonly: boolean() }, { description: 'Attach as a CD-ROM.', preserveUnknown: true }),
      bootOrder: bootOrder('disk'),
    },
    { required: ['name'], preserveUnknown: true, description: PRESERVED },
  );
}

function interfaceSchema(): JsonSchema {
  return object(
    {
      name: name('interface; a network of the same name connects it'),
      masquerade: opaque('Connect through NAT on the pod network.'),
      bridge: opaque('Connect through a bridge.'),
      ports: list(
        object(
          {
            name: string(),
            protocol: enumOf(['TCP', 'UDP']),
            port: integer(undefined, { minimum: 1, maximum: 65535 }),
          },
          { required: ['port'] },
        ),
        { description: 'Ports to forward to the guest (masquerade).' },
      ),
      macAddress: string(),
      bootOrder: bootOrder('interface'),
    },
    { required: ['name'], preserveUnknown: true, description: PRESERVED },
  );
}

function devicesSchema(path: string): JsonSchema {
  const disks = `${path}.domain.devices.disks`;
  // Disk `d` is the only device with its boot order.
  const soleBootOrder =
    'self.disks.exists_one(e, has(e.bootOrder) && e.bootOrder == d.bootOrder) && ' +
    '!(has(self.interfaces) && self.interfaces.exists(i, has(i.bootOrder) && i.bootOrder == d.bootOrder))';
  return object(
    {
      disks: list(diskSchema(), { maxItems: MAX_DEVICES, rules: [uniqueNames(disks, 'disk')] }),
      interfaces: list(interfaceSchema(), {
        maxItems: MAX_DEVICES,
        rules: [uniqueNames(`${path}.domain.devices.interfaces`, 'interface')],
      }),
    },
    {
      preserveUnknown: true,
      description: PRESERVED,
      rules: [
        {
          rule: `!has(self.disks) || self.disks.all(d, !has(d.bootOrder) || (${soleBootOrder}))`,
          message: `${disks}: two devices have the same bootOrder; boot orders must be unique across disks and interfaces`,
          fieldPath: '.disks',
        },
        {
          rule:
            '!has(self.interfaces) || self.interfaces.all(i, !has(i.bootOrder) || ' +
            'self.interfaces.exists_one(j, has(j.bootOrder) && j.bootOrder == i.bootOrder))',
          message: `${path}.domain.devices.interfaces: two interfaces have the same bootOrder; boot orders must be unique`,
          fieldPath: '.interfaces',
        },
      ],
    },
  );
}

function domainSchema(path: string): JsonSchema {
  const count = (what: string) => integer(`Number of ${what}.`, { minimum: 0 });
  return object(
    {
      cpu: object(
        { cores: count('cores per socket'), sockets: count('sockets'), threads: count('threads per core'), model: string() },
        { preserveUnknown: true, description: PRESERVED },
      ),
      memory: object({ guest: quantity('Memory the guest sees.') }, { preserveUnknown: true, description: PRESERVED }),
      resources: object(
        { requests: resourceList(), limits: resourceList() },
        { preserveUnknown: true, description: 'Resources for the VM; requests.memory sizes the guest unless memory.guest is set.' },
      ),
      machine: object({ type: string('Machine type, e.g. q35.') }, { preserveUnknown: true }),
      firmware: object(
        {
          uuid: string('SMBIOS UUID of the guest.'),
          bootloader: object(
            {
              bios: object({ useSerial: boolean() }, { preserveUnknown: true }),
              efi: object({ secureBoot: boolean(), persistent: boolean() }, { preserveUnknown: true }),
            },
            { preserveUnknown: true },
          ),
          kernelBoot: object(
            {
              kernelArgs: string(),
              container: object(
                { image: string(), kernelPath: string(), initrdPath: string() },
                { preserveUnknown: true },
              ),
            },
            { preserveUnknown: true },
          ),
        },
        { preserveUnknown: true, description: PRESERVED },
      ),
      clock: object(
        { utc: object({ offsetSeconds: integer() }, { preserveUnknown: true }), timezone: string() },
        {
          preserveUnknown: true,
          description: PRESERVED,
          rules: [{ rule: '!(has(self.utc) && has(self.timezone))', message: `${path}.domain.clock: set utc or timezone, not both` }],
        },
      ),
      features: object(
        { acpi: object({ enabled: boolean() }, { preserveUnknown: true }) },
        { preserveUnknown: true, description: PRESERVED },
      ),
      devices: devicesSchema(path),
    },
    { preserveUnknown: true, description: `The virtual hardware. ${PRESERVED}` },
  );
}

function volumeSchema(): JsonSchema {
  return object(
    {
      name: name('volume; the disk of the same name uses it'),
      containerDisk: object(
        { image: string('OCI image holding the disk image.'), imagePullPolicy: string() },
        { required: ['image'], preserveUnknown: true },
      ),
      cloudInitNoCloud: object(
        {
          userData: string(),
          userDataBase64: string(),
          networkData: string(),
          networkDataBase64: string(),
          secretRef: localObjectReference,
          networkDataSecretRef: localObjectReference,
        },
        { preserveUnknown: true },
      ),
      emptyDisk: object({ capacity: quantity() }, { required: ['capacity'], preserveUnknown: true }),
      persistentVolumeClaim: object(
        { claimName: string(), readOnly: boolean() },
        { required: ['claimName'], preserveUnknown: true },
      ),
      hostDisk: object(
        { path: string(), type: enumOf(['Disk', 'DiskOrCreate']), capacity: quantity() },
        { required: ['path', 'type'], preserveUnknown: true },
      ),
    },
    { required: ['name'], preserveUnknown: true, description: PRESERVED },
  );
}

function tolerationSchema(): JsonSchema {
  return object({
    key: string(),
    operator: string(),
    value: string(),
    effect: string(),
    tolerationSeconds: integer(undefined, { format: 'int64' }),
  });
}

/**
 * The VMI spec at `path` (`spec` for a VMI, `spec.template.spec` for a VM);
 * `rules` are added to the ones every VMI spec carries.
 */
export function vmiSpecSchema(path: string, rules: ValidationRule[] = []): JsonSchema {
  const disks = `${path}.domain.devices.disks`;
  const volumes = `${path}.volumes`;
  return object(
    {
      domain: domainSchema(path),
      networks: list(
        object(
          {
            name: name('network; the interface of the same name uses it'),
            pod: object({ vmNetworkCIDR: string(), vmIPv6NetworkCIDR: string() }, { preserveUnknown: true }),
          },
          { required: ['name'], preserveUnknown: true, description: PRESERVED },
        ),
        { maxItems: MAX_DEVICES, rules: [uniqueNames(`${path}.networks`, 'network')] },
      ),
      volumes: list(volumeSchema(), { maxItems: MAX_DEVICES, rules: [uniqueNames(volumes, 'volume')] }),
      nodeSelector: stringMap(),
      affinity: opaque('Pod affinity, as in a pod spec.'),
      tolerations: list(tolerationSchema()),
      terminationGracePeriodSeconds: integer('Seconds the guest gets to shut down.', { format: 'int64', minimum: 0 }),
    },
    {
      required: ['domain'],
      preserveUnknown: true,
      description: `Specification of the virtual machine instance. ${PRESERVED}`,
      rules: [
        {
          rule:
            '!has(self.domain.devices) || !has(self.domain.devices.disks) || ' +
            'self.domain.devices.disks.all(d, has(self.volumes) && self.volumes.exists(v, v.name == d.name))',
          message: `${disks}: every disk must name a volume in ${volumes}`,
          fieldPath: '.domain.devices.disks',
        },
        ...rules,
      ],
    },
  );
}

// ---- status ----

function conditionsSchema(): JsonSchema {
  return list(
    object(
      {
        type: string(),
        status: string(),
        reason: string(),
        message: string(),
        lastProbeTime: time(),
        lastTransitionTime: time(),
      },
      { preserveUnknown: true },
    ),
  );
}

function vmStatusSchema(): JsonSchema {
  return object(
    {
      printableStatus: string('Human readable status: Stopped, Starting, Running, ...'),
      ready: boolean(),
      created: boolean(),
      conditions: conditionsSchema(),
      startFailure: object(
        { consecutiveFailCount: integer(), lastFailedVMIUID: string(), retryAfterTimestamp: time() },
        { preserveUnknown: true },
      ),
    },
    { preserveUnknown: true },
  );
}

function vmiStatusSchema(): JsonSchema {
  return object(
    {
      phase: string('Pending, Scheduling, Scheduled, Running, Succeeded, Failed or Unknown.'),
      reason: string(),
      nodeName: string(),
      conditions: conditionsSchema(),
      interfaces: list(
        object(
          {
            name: string(),
            ipAddress: string(),
            ipAddresses: list(string()),
            mac: string(),
            interfaceName: string(),
            infoSource: string(),
          },
          { preserveUnknown: true },
        ),
      ),
      phaseTransitionTimestamps: list(
        object({ phase: string(), phaseTransitionTimestamp: time() }, { preserveUnknown: true }),
      ),
      guestOSInfo: object(
        {
          id: string(),
          name: string(),
          prettyName: string(),
          version: string(),
          versionId: string(),
          kernelRelease: string(),
          kernelVersion: string(),
          machine: string(),
        },
        { preserveUnknown: true },
      ),
    },
    { preserveUnknown: true },
  );
}

// ---- CRDs ----

function topLevel(spec: JsonSchema, status: JsonSchema, description: string): JsonSchema {
  return object(
    { apiVersion: string(), kind: string(), metadata: object({}), spec, status },
    { required: ['spec'], description },
  );
}

function crd(opts: {
  kind: string;
  plural: string;
  shortNames: string[];
  columns: CustomResourceDefinition['spec']['versions'][number]['additionalPrinterColumns'];
  selectableFields?: string[];
  schema: JsonSchema;
}): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${opts.plural}.${GROUP}`, labels: { 'app.kubernetes.io/part-of': 'vkvm' } },
    spec: {
      group: GROUP,
      names: {
        kind: opts.kind,
        listKind: `${opts.kind}List`,
        plural: opts.plural,
        singular: opts.kind.toLowerCase(),
        shortNames: opts.shortNames,
        categories: ['all'],
      },
      scope: 'Namespaced',
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: opts.columns,
          ...(opts.selectableFields ? { selectableFields: opts.selectableFields.map((jsonPath) => ({ jsonPath })) } : {}),
          schema: { openAPIV3Schema: opts.schema },
        },
      ],
    },
  };
}

const AGE = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };
const READY = { name: 'Ready', type: 'string', jsonPath: ".status.conditions[?(@.type=='Ready')].status" };

export function virtualMachineCrd(): CustomResourceDefinition {
  const path = 'spec.template.spec';
  const spec = object(
    {
      running: boolean('Deprecated by KubeVirt in favour of runStrategy: true is Always, false is Halted.'),
      runStrategy: enumOf(RUN_STRATEGIES, 'When the VM should run. Absent (and no running) means Halted.'),
      instancetype: object({ name: string(), kind: string() }, { preserveUnknown: true }),
      preference: object({ name: string(), kind: string() }, { preserveUnknown: true }),
      template: object(
        {
          metadata: object(
            { labels: stringMap(), annotations: stringMap() },
            { preserveUnknown: true, description: 'Labels and annotations for the VMI.' },
          ),
          spec: vmiSpecSchema(path),
        },
        { required: ['spec'], description: 'The VMI this VM runs.' },
      ),
    },
    {
      required: ['template'],
      preserveUnknown: true,
      description: `Specification of the virtual machine. ${PRESERVED}`,
      rules: [
        {
          rule: '!(has(self.running) && has(self.runStrategy))',
          message: 'spec.running and spec.runStrategy are mutually exclusive',
          fieldPath: '.running',
        },
        // KubeVirt accepts a VM whose instancetype supplies the memory, so vkvm does too: the VM
        // controller reports spec.instancetype as unsupported, and the VMI it makes is refused for its memory.
        memoryRequired(path, `has(self.instancetype) || ${memoryGiven('self.template.spec')}`, '.template.spec.domain.resources.requests.memory'),
      ],
    },
  );
  return crd({
    kind: 'VirtualMachine',
    plural: 'virtualmachines',
    shortNames: ['vm', 'vms'],
    columns: [AGE, { name: 'Status', type: 'string', jsonPath: '.status.printableStatus', description: 'Human Readable Status' }, READY],
    schema: topLevel(spec, vmStatusSchema(), 'VirtualMachine (kubevirt.io/v1) handles a VirtualMachineInstance: starts, stops and restarts it.'),
  });
}

export function virtualMachineInstanceCrd(): CustomResourceDefinition {
  const spec = vmiSpecSchema('spec', [memoryRequired('spec', memoryGiven('self'), '.domain.resources.requests.memory')]);
  return crd({
    kind: 'VirtualMachineInstance',
    plural: 'virtualmachineinstances',
    shortNames: ['vmi', 'vmis'],
    columns: [
      AGE,
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'IP', type: 'string', jsonPath: '.status.interfaces[0].ipAddress' },
      { name: 'NodeName', type: 'string', jsonPath: '.status.nodeName' },
      READY,
      { name: 'Live-Migratable', type: 'string', jsonPath: ".status.conditions[?(@.type=='LiveMigratable')].status", priority: 1 },
      { name: 'Paused', type: 'string', jsonPath: ".status.conditions[?(@.type=='Paused')].status", priority: 1 },
    ],
    // Each node agent watches only the VMIs on its node (status.nodeName=<node>), as virt-handler does by label.
    selectableFields: ['.status.nodeName'],
    schema: topLevel(spec, vmiStatusSchema(), 'VirtualMachineInstance (kubevirt.io/v1) is one running virtual machine.'),
  });
}
