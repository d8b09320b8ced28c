// The VMI spec fields vkvm reads, as a tree, and a walk that lists every
// field present in an object but absent from the tree. Those fields are not
// errors: the VM runs without them and the controller reports the list as a
// condition and an event, so nothing the user asked for is dropped silently.
//
// A field "asks for nothing" when it is null, false, "", or an empty list
// (generated manifests are full of those); such fields are never reported.
// Fields whose *value* decides whether vkvm can honour them (features.smm,
// autoattach*, cdrom.readonly, ...) are accepted here and checked in
// translate.ts.

/** `true`: any value is read (leaf); an object: only these keys; a one-item array: a list of that shape. */
export type FieldShape = true | { readonly [key: string]: FieldShape } | readonly [FieldShape];

const featureState = { enabled: true } as const;
const objectReference = { name: true } as const;

/** spec.* of a VirtualMachineInstance (and spec.template.spec of a VirtualMachine). */
export const SUPPORTED_VMI_SPEC: FieldShape = {
  domain: {
    resources: { requests: { cpu: true, memory: true }, limits: { cpu: true, memory: true } },
    cpu: { cores: true, sockets: true, threads: true, model: true },
    memory: { guest: true },
    machine: { type: true },
    firmware: {
      uuid: true,
      bootloader: { bios: {}, efi: { secureBoot: true } },
      kernelBoot: {
        kernelArgs: true,
        container: { image: true, imagePullPolicy: true, kernelPath: true, initrdPath: true },
      },
    },
    clock: { utc: { offsetSeconds: true }, timezone: true },
    features: { acpi: featureState, apic: true, smm: true },
    devices: {
      disks: [
        {
          name: true,
          bootOrder: true,
          disk: { bus: true, readonly: true },
          cdrom: { bus: true, readonly: true, tray: true },
        },
      ],
      interfaces: [
        {
          name: true,
          model: true,
          masquerade: {},
          bridge: {},
          ports: [{ name: true, protocol: true, port: true }],
          macAddress: true,
          bootOrder: true,
        },
      ],
      autoattachPodInterface: true,
      autoattachSerialConsole: true,
      autoattachGraphicsDevice: true,
      autoattachMemBalloon: true,
    },
  },
  // Scheduling: honoured by the scheduler through the launcher pod, not by the VM.
  nodeSelector: true,
  affinity: true,
  tolerations: true,
  terminationGracePeriodSeconds: true,
  hostname: true,
  architecture: true,
  networks: [{ name: true, pod: {} }],
  volumes: [
    {
      name: true,
      containerDisk: { image: true, imagePullPolicy: true },
      cloudInitNoCloud: {
        userData: true,
        userDataBase64: true,
        networkData: true,
        networkDataBase64: true,
        secretRef: objectReference,
        networkDataSecretRef: objectReference,
      },
      emptyDisk: { capacity: true },
      persistentVolumeClaim: { claimName: true, readOnly: true },
      hostDisk: { path: true, type: true, capacity: true },
    },
  ],
};

/** True when `obj` has `key` set (not null or undefined), typed or not. */
export function hasField(obj: object, key: string): boolean {
  return (obj as unknown as Record<string, unknown>)[key] != null;
}

/** True when a field's value asks for something (see the header). */
export function asksForSomething(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === '') return false;
  return !(Array.isArray(value) && value.length === 0);
}

/**
 * Field paths under `path` present in `value` but not in `shape`, in document
 * order: `spec.domain.devices.gpus`, `spec.volumes[2].dataVolume`. An
 * unsupported field is reported once, not its children.
 */
export function unsupportedFields(value: unknown, shape: FieldShape, path: string): string[] {
  if (shape === true || !asksForSomething(value)) return [];
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) return [];
    return value.flatMap((item, i) => unsupportedFields(item, shape[0], `${path}[${i}]`));
  }
  if (typeof value !== 'object' || Array.isArray(value)) return [];
  const known = shape as { readonly [key: string]: FieldShape };
  return Object.entries(value as Record<string, unknown>).flatMap(([key, child]) => {
    const childShape = known[key];
    if (childShape === undefined) return asksForSomething(child) ? [`${path}.${key}`] : [];
    return unsupportedFields(child, childShape, `${path}.${key}`);
  });
}
