// Pod fixtures for e2e tests: the test guest as a pod for the vkvm node, and
// the states tests wait for.
import type { V1Pod, V1ResourceRequirements } from '@kubernetes/client-node';
import { condition } from './wait.js';

/** The test guest's containerDisk, which startAgent imports into every agent's store (no registry is asked). */
export { TEST_GUEST_IMAGE, TEST_GUEST_KERNEL_IMAGE } from '../../../provider/images/test-guest-images.js';
import { TEST_GUEST_IMAGE } from '../../../provider/images/test-guest-images.js';
export const VKVM_TOLERATION = { key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' };

export interface TestGuestPodOptions {
  name: string;
  /** The node it must run on (kubernetes.io/hostname); without, any vkvm node (type: virtual-kubelet). */
  node?: string;
  image?: string;
  /** Tolerate the vkvm node's taint (default true). */
  tolerate?: boolean;
  terminationGracePeriodSeconds?: number;
  restartPolicy?: 'Always' | 'OnFailure' | 'Never';
  annotations?: Record<string, string>;
  /** containerPorts (TCP), e.g. the ones masquerade forwards. */
  ports?: number[];
  resources?: V1ResourceRequirements;
}

/**
 * The test guest as a pod for the vkvm node. A small CPU request: the node's
 * 2 cores must fit several VMs (each still gets 1 vCPU, uncapped); 192Mi is
 * enough for the guest.
 */
export function testGuestPod(o: TestGuestPodOptions): V1Pod {
  return {
    metadata: { name: o.name, ...(o.annotations ? { annotations: o.annotations } : {}) },
    spec: {
      nodeSelector: o.node ? { 'kubernetes.io/hostname': o.node } : { type: 'virtual-kubelet' },
      tolerations: o.tolerate === false ? [] : [VKVM_TOLERATION],
      ...(o.terminationGracePeriodSeconds !== undefined ? { terminationGracePeriodSeconds: o.terminationGracePeriodSeconds } : {}),
      ...(o.restartPolicy ? { restartPolicy: o.restartPolicy } : {}),
      containers: [
        {
          name: 'vm',
          image: o.image ?? TEST_GUEST_IMAGE,
          resources: o.resources ?? { requests: { cpu: '100m' }, limits: { memory: '192Mi' } },
          ...(o.ports ? { ports: o.ports.map((containerPort) => ({ containerPort })) } : {}),
        },
      ],
    },
  };
}

export const isRunningAndReady = (p: V1Pod): boolean => p.status?.phase === 'Running' && condition(p, 'Ready') === 'True';
