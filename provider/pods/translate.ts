// Pure translation of a plain pod into a VmSpec, or a SpecError naming every
// pod field that cannot be realized. No I/O.
//
// How a pod describes its VM (documented in README):
//   image  /path/disk.qcow2 | file:///path   host image (qcow2 or raw), booted from a per-VM overlay
//          http(s)://…/disk.qcow2            downloaded once into the image cache, then overlaid
//          kernel:/path/vmlinuz              direct kernel boot; initrd from annotation vkvm.io/initrd
//          an OCI reference                  a containerDisk image: the node agent pulls it (imagePullPolicy,
//                                            imagePullSecrets) and boots the one file under /disk, e.g. the
//                                            test guest every node has, localhost/vkvm/test-guest:v1
//   resources  cpu → vCPUs (limits, else requests, default 1; the limit also caps CPU time, and the
//              request weighs the VM's CPU under contention as the kubelet's cgroup weight does),
//              ephemeral-storage limit → what the VM's disks may take (provider/pods/ephemeral-storage.ts),
//              memory → guest RAM (requests, which the API server defaults to limits; default 512Mi)
//   args, env  kernel boot: appended to the kernel command line (env as KEY=VALUE, which the
//              kernel hands to init as environment); disk images: not supported (use user-data)
//   annotations vkvm.io/user-data (cloud-init user-data, disk images), vkvm.io/initrd,
//              vkvm.io/kernel-cmdline (base command line), vkvm.io/machine-type,
//              vkvm.io/pod-network: bridge (default: the guest holds the pod IP) |
//              masquerade (NAT; the container ports are forwarded) | none (no NIC)
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { parseQuantity as parseKubeQuantity } from '../kube/quantity.js';
import { SpecError, type SpecCause } from '../../vmm/errors.js';
import {
  VM_SPEC_VERSION,
  type DiskSource,
  type DiskSpec,
  type ImagePullPolicy,
  type InterfaceBinding,
  type KernelBoot,
  type VmSpec,
} from '../../vmm/spec.js';
import { defaultPullPolicy, PULL_POLICIES } from '../images/reference.js';
import { derivedMac, domainName, parseImage, type BootSource } from '../vm-identity.js';

export const DEFAULT_MEMORY = '512Mi';
export const ANNOTATION = {
  userData: 'vkvm.io/user-data',
  initrd: 'vkvm.io/initrd',
  kernelCmdline: 'vkvm.io/kernel-cmdline',
  machineType: 'vkvm.io/machine-type',
  podNetwork: 'vkvm.io/pod-network',
} as const;
const POD_NETWORK_MODES = ['bridge', 'masquerade', 'none'] as const;

function parseQuantity(raw: string, path: string, causes: SpecCause[]): number | undefined {
  const n = parseKubeQuantity(raw);
  if (n === null || n < 0) {
    causes.push({ path, reason: 'FieldValueInvalid', message: `${JSON.stringify(raw)} is not a resource quantity` });
    return undefined;
  }
  return n;
}

/** A disk image's source; a registry image keeps the pull policy the API server defaulted (Kubernetes' default when absent). */
function diskSource(
  source: Extract<BootSource, { kind: 'image' | 'url' | 'registry' }>,
  c: V1Container,
  at: string,
  causes: SpecCause[],
): DiskSource {
  if (source.kind === 'image') return { kind: 'image', path: source.path };
  if (source.kind === 'url') return { kind: 'url', url: source.url };
  const pullPolicy = (c.imagePullPolicy ?? defaultPullPolicy(source.image)) as ImagePullPolicy;
  if (!PULL_POLICIES.includes(pullPolicy)) {
    causes.push({
      path: `${at}.imagePullPolicy`,
      reason: 'FieldValueNotSupported',
      message: `${JSON.stringify(pullPolicy)} is not one of ${PULL_POLICIES.join(', ')}`,
    });
  }
  return { kind: 'registry', image: source.image, pullPolicy };
}

export function translatePod(pod: V1Pod): VmSpec | SpecError {
  const causes: SpecCause[] = [];
  const meta = pod.metadata ?? {};
  const annotations = meta.annotations ?? {};
  const containers = pod.spec?.containers ?? [];
  if (containers.length !== 1) {
    causes.push({
      path: 'spec.containers',
      reason: 'FieldValueInvalid',
      message: `a VM pod has exactly one container (the VM), found ${containers.length}`,
    });
  }
  if ((pod.spec?.initContainers ?? []).length > 0) {
    causes.push({ path: 'spec.initContainers', reason: 'FieldValueNotSupported', message: 'init containers cannot run on a VM node' });
  }
  const c = containers[0];
  if (!c) return new SpecError(causes);
  const at = 'spec.containers[0]';

  const source = parseImage(c.image ?? '');
  if (!source) {
    causes.push({
      path: `${at}.image`,
      reason: 'FieldValueNotSupported',
      message: `${JSON.stringify(c.image ?? '')} is not a VM image: use an OCI reference, a host path, file:///path, an http(s) URL or kernel:/path`,
    });
  }
  if (c.command?.length) {
    causes.push({
      path: `${at}.command`,
      reason: 'FieldValueNotSupported',
      message: 'a VM has no entrypoint to override; use args for the kernel command line',
    });
  }
  const limits = c.resources?.limits ?? {};
  const requests = c.resources?.requests ?? {};
  const cpuRaw = limits.cpu ?? requests.cpu ?? '1';
  const cpuPath = `${at}.resources.${limits.cpu ? 'limits' : 'requests'}.cpu`;
  const cpu = parseQuantity(cpuRaw, cpuPath, causes);
  // Guest RAM is what the scheduler charged: the request (the API server defaults it to the limit when only that
  // is set); a limit above it buys the guest nothing.
  const memRaw = requests.memory ?? limits.memory ?? DEFAULT_MEMORY;
  const memPath = `${at}.resources.${requests.memory || !limits.memory ? 'requests' : 'limits'}.memory`;
  const memBytes = parseQuantity(memRaw, memPath, causes);
  const memoryMiB = memBytes === undefined ? 0 : Math.ceil(memBytes / (1024 * 1024));
  if (memBytes !== undefined && memoryMiB < 32) {
    causes.push({ path: memPath, reason: 'FieldValueInvalid', message: `${memRaw} is below the 32Mi a VM needs` });
  }
  if (cpu !== undefined && cpu <= 0) causes.push({ path: cpuPath, reason: 'FieldValueInvalid', message: 'must be more than 0' });

  const extraCmdline = [...(c.env ?? []).map((e) => `${e.name}=${e.value ?? ''}`), ...(c.args ?? [])];
  let kernelBoot: KernelBoot | undefined;
  const disks: DiskSpec[] = [];
  if (source?.kind === 'kernel') {
    kernelBoot = {
      kernelPath: source.kernelPath,
      cmdline: [annotations[ANNOTATION.kernelCmdline] ?? 'console=ttyS0', ...extraCmdline].join(' '),
    };
    const initrd = annotations[ANNOTATION.initrd];
    if (initrd) kernelBoot.initrdPath = initrd;
  } else if (source) {
    if (extraCmdline.length) {
      causes.push({
        path: c.env?.length ? `${at}.env` : `${at}.args`,
        reason: 'FieldValueNotSupported',
        message: `args and env apply to kernel boot only; pass data to a disk image with the ${ANNOTATION.userData} annotation`,
      });
    }
    disks.push({ name: 'root', device: 'disk', bus: 'virtio', bootOrder: 1, source: diskSource(source, c, at, causes) });
  }
  const userData = annotations[ANNOTATION.userData];
  if (userData !== undefined) {
    disks.push({
      name: 'cloudinit',
      device: 'cdrom',
      bus: 'sata',
      readOnly: true,
      source: { kind: 'cloudInit', userData, metaData: `instance-id: ${meta.uid ?? ''}\nlocal-hostname: ${meta.name ?? ''}\n` },
    });
  }
  if (!meta.uid) causes.push({ path: 'metadata.uid', reason: 'FieldValueRequired', message: 'pod has no UID' });
  const networkMode = annotations[ANNOTATION.podNetwork] ?? 'bridge';
  if (!(POD_NETWORK_MODES as readonly string[]).includes(networkMode)) {
    causes.push({
      path: `metadata.annotations[${ANNOTATION.podNetwork}]`,
      reason: 'FieldValueNotSupported',
      message: `${JSON.stringify(networkMode)} is not one of ${POD_NETWORK_MODES.join(', ')}`,
    });
  }
  const forwardPorts = (c.ports ?? []).map((p) => ({
    protocol: (p.protocol ?? 'TCP') as 'TCP' | 'UDP',
    port: p.containerPort,
    ...(p.name ? { name: p.name } : {}),
  }));
  (c.ports ?? []).forEach((p, i) => {
    if (p.protocol && p.protocol !== 'TCP' && p.protocol !== 'UDP') {
      causes.push({
        path: `${at}.ports[${i}].protocol`,
        reason: 'FieldValueNotSupported',
        message: 'only TCP and UDP ports can be forwarded to a VM',
      });
    }
  });
  if (causes.length) return new SpecError(causes);

  const millicores = Math.round((cpu ?? 1) * 1000);
  const spec: VmSpec = {
    version: VM_SPEC_VERSION,
    uid: meta.uid!,
    name: domainName(meta.namespace ?? 'default', meta.name ?? ''),
    cpu: { sockets: 1, cores: Math.max(1, Math.ceil(millicores / 1000)), threads: 1 },
    memoryMiB,
    firmware: { kind: 'bios' },
    disks,
    interfaces:
      networkMode === 'none'
        ? []
        : [
            {
              name: 'default',
              binding: networkMode as InterfaceBinding,
              // The pod UID is this VM's identity; a restart (same pod) keeps the MAC.
              mac: derivedMac(meta.uid!, 'default'),
              ...(networkMode === 'masquerade' && forwardPorts.length ? { forwardPorts } : {}),
            },
          ],
    guestAgent: true,
    vnc: true,
    acpi: true,
    labels: { 'vkvm.io/namespace': meta.namespace ?? 'default', 'vkvm.io/pod': meta.name ?? '' },
  };
  if (limits.cpu) spec.cpu.limitMillicores = millicores;
  if (kernelBoot) spec.kernelBoot = kernelBoot;
  const machineType = annotations[ANNOTATION.machineType];
  if (machineType) spec.machineType = machineType;
  return spec;
}

/**
 * The same causes at the pod's own fields: for errors found after
 * translation (the launcher's host-file and download checks report VmSpec
 * paths), so a pod's user reads the field they wrote.
 */
export function atPodFields(spec: VmSpec): (causes: SpecCause[]) => SpecCause[] {
  const image = 'spec.containers[0].image';
  const fieldOf = (path: string): string => {
    const disk = /^disks\[(\d+)\]/.exec(path);
    if (disk) return spec.disks[Number(disk[1])]?.name === 'cloudinit' ? `metadata.annotations[${ANNOTATION.userData}]` : image;
    if (path === 'kernelBoot.initrdPath') return `metadata.annotations[${ANNOTATION.initrd}]`;
    // A pod's one NIC and its MAC follow from its UID.
    if (path.startsWith('interfaces')) return 'metadata.uid';
    return path.startsWith('kernelBoot') ? image : path;
  };
  return (causes) => causes.map((c) => ({ ...c, path: fieldOf(c.path) }));
}
