// KubeVirt fixtures the e2e tests share (VM and VMI manifests), and the
// custom objects calls on them in one namespace.
import { parse } from 'yaml';
import { mergePatch } from '../../../provider/kube/client.js';
import { isNotFound } from '../../../provider/kube/errors.js';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec } from '../../../provider/kubevirt/types.js';
import { TEST_GUEST_IMAGE } from '../../../provider/images/test-guest-images.js';
import type { TestNamespace } from './cluster.js';

/**
 * The VMI spec of KubeVirt's quickstart smoke VM: 1 core, q35, containerDisk
 * + emptyDisk + cloudInitNoCloud on virtio, masquerade on the pod network.
 * Its containerDisk is the test guest's (in every test agent's store), in
 * place of the docs' CirrOS demo; memory is 128Mi because the docs' 64M is
 * below what the test guest's Debian kernel boots in.
 */
export function smokeVmiSpec(): VirtualMachineInstanceSpec {
  return {
    domain: {
      cpu: { cores: 1 },
      machine: { type: 'q35' },
      resources: { requests: { memory: '128Mi' } },
      devices: {
        disks: [
          { name: 'containerdisk', disk: { bus: 'virtio' } },
          { name: 'emptydisk', disk: { bus: 'virtio' } },
          { name: 'cloudinitdisk', disk: { bus: 'virtio' } },
        ],
        interfaces: [{ name: 'default', masquerade: {} }],
      },
    },
    networks: [{ name: 'default', pod: {} }],
    volumes: [
      { name: 'containerdisk', containerDisk: { image: TEST_GUEST_IMAGE } },
      { name: 'emptydisk', emptyDisk: { capacity: '64Mi' } },
      { name: 'cloudinitdisk', cloudInitNoCloud: { userDataBase64: 'SGkuXG4=' } },
    ],
  };
}

/** A standalone VMI of `spec` (the smoke VM's by default). */
export const vmiOf = (name: string, spec: VirtualMachineInstanceSpec = smokeVmiSpec()): VirtualMachineInstance => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachineInstance',
  metadata: { name },
  spec,
});

/** KubeVirt's quickstart testvm (see smokeVmiSpec), runStrategy Always. */
export const smokeVm = (name = 'testvm'): VirtualMachine => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachine',
  metadata: { name },
  spec: {
    runStrategy: 'Always',
    template: {
      metadata: { labels: { 'kubevirt.io/size': 'small', 'kubevirt.io/domain': name } },
      spec: smokeVmiSpec(),
    },
  },
});

/**
 * A VM for the cluster-side controllers alone: 128Mi and 200m CPU, for a node
 * pool (vkvm.io/pool: e2e) with a `dedicated` taint, which no node is in.
 */
export const pooledVm = (name: string): VirtualMachine => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachine',
  metadata: { name },
  spec: {
    runStrategy: 'Always',
    template: {
      metadata: { labels: { 'kubevirt.io/size': 'small' } },
      spec: {
        domain: {
          resources: { requests: { memory: '128Mi', cpu: '200m' } },
          devices: { disks: [{ name: 'containerdisk', disk: { bus: 'virtio' } }] },
        },
        nodeSelector: { 'vkvm.io/pool': 'e2e' },
        tolerations: [{ key: 'dedicated', operator: 'Exists', effect: 'NoSchedule' }],
        volumes: [{ name: 'containerdisk', containerDisk: { image: 'quay.io/kubevirt/cirros-container-disk-demo' } }],
      },
    },
  },
});

// KubeVirt's quickstart VM (kubevirt.io/labs/manifests/vm.yaml) running at
// once, plus an emptyDisk, and fields vkvm does not type (a GPU, SMM, a disk
// cache mode, an interface model, an eviction strategy), which must be kept.
const QUICKSTART_VM = `
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: testvm
spec:
  runStrategy: Always
  template:
    metadata:
      creationTimestamp: null
      labels:
        kubevirt.io/size: small
        kubevirt.io/domain: testvm
    spec:
      domain:
        devices:
          disks:
            - name: containerdisk
              disk:
                bus: virtio
            - name: cloudinitdisk
              disk:
                bus: virtio
            - name: scratch
              disk:
                bus: virtio
              cache: none
          interfaces:
          - name: default
            masquerade: {}
            model: virtio
          gpus:
          - name: gpu1
            deviceName: nvidia.com/GP102GL_Tesla_P40
        features:
          smm:
            enabled: true
        resources:
          requests:
            memory: 64M
      evictionStrategy: LiveMigrate
      networks:
      - name: default
        pod: {}
      volumes:
        - name: containerdisk
          containerDisk:
            image: quay.io/kubevirt/cirros-container-disk-demo
        - name: cloudinitdisk
          cloudInitNoCloud:
            userDataBase64: SGkuXG4=
        - name: scratch
          emptyDisk:
            capacity: 1Gi
`;

// The parsed manifests are plain JSON data, untyped fields included; these are the parts tests edit.
export interface ManifestDisk {
  name: string;
  disk?: { bus?: string };
  cdrom?: { bus?: string };
  bootOrder?: number;
}
export interface ManifestVmiSpec {
  domain: { devices: { disks: ManifestDisk[] }; resources?: unknown; memory?: unknown; clock?: unknown };
  volumes: unknown[];
}
export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec: object;
}
export type VmManifest = Manifest & {
  spec: { running?: boolean; runStrategy?: string; instancetype?: unknown; template: { spec: ManifestVmiSpec } };
};

/** KubeVirt's quickstart VM as a manifest, with fields vkvm does not type. */
export function quickstartVm(name: string, namespace: string): VmManifest {
  const vm = parse(QUICKSTART_VM) as VmManifest;
  return { ...vm, metadata: { ...vm.metadata, name, namespace } };
}

/** The quickstart VM's template as a standalone VMI manifest. */
export function quickstartVmi(name: string, namespace: string): Manifest & { spec: ManifestVmiSpec } {
  const vm = quickstartVm(name, namespace);
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstance',
    metadata: { name, namespace, labels: { 'kubevirt.io/domain': name } },
    spec: vm.spec.template.spec,
  };
}

/** The custom objects calls on VMs and VMIs in one namespace. */
export function kubevirtIn(ns: TestNamespace) {
  const custom = ns.cluster.clients.custom;
  const at = (plural: 'virtualmachines' | 'virtualmachineinstances') => ({
    group: 'kubevirt.io',
    version: 'v1',
    namespace: ns.name,
    plural,
  });
  const orUndefined = async <T>(read: Promise<unknown>): Promise<T | undefined> => {
    try {
      return (await read) as T;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
  return {
    createVm: async (vm: VirtualMachine) =>
      (await custom.createNamespacedCustomObject({
        ...at('virtualmachines'),
        body: { ...vm, metadata: { ...vm.metadata, namespace: ns.name } },
      })) as VirtualMachine,
    createVmi: async (vmi: VirtualMachineInstance) =>
      (await custom.createNamespacedCustomObject({
        ...at('virtualmachineinstances'),
        body: { ...vmi, metadata: { ...vmi.metadata, namespace: ns.name } },
      })) as VirtualMachineInstance,
    readVm: (name: string) => orUndefined<VirtualMachine>(custom.getNamespacedCustomObject({ ...at('virtualmachines'), name })),
    readVmi: (name: string) =>
      orUndefined<VirtualMachineInstance>(custom.getNamespacedCustomObject({ ...at('virtualmachineinstances'), name })),
    /** A JSON merge patch (null removes a field). */
    patchVm: (name: string, body: object) => custom.patchNamespacedCustomObject({ ...at('virtualmachines'), name, body }, mergePatch),
    patchVmi: (name: string, body: object) =>
      custom.patchNamespacedCustomObject({ ...at('virtualmachineinstances'), name, body }, mergePatch),
    deleteVm: (name: string) => custom.deleteNamespacedCustomObject({ ...at('virtualmachines'), name }),
    deleteVmi: (name: string) => custom.deleteNamespacedCustomObject({ ...at('virtualmachineinstances'), name }),
  };
}
