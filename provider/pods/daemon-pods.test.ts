import type { V1Pod, V1PodSpec } from '@kubernetes/client-node';
import t from 'tap';
import { daemonPodRefusal } from './daemon-pods.js';
import { judgeAdmission } from './node-admission.js';

const pod = (spec: Partial<V1PodSpec>, owner = 'DaemonSet'): V1Pod => ({
  metadata: { name: 'p', ownerReferences: [{ apiVersion: 'apps/v1', kind: owner, name: 'kube-proxy', uid: 'u', controller: true }] },
  spec: { containers: [{ name: 'c', image: 'registry.k8s.io/kube-proxy:v1.33.0' }], ...spec },
});
// What the DaemonSet controller adds to every pod it makes, and kube-proxy's and flannel's manifests ask.
const daemonAffinity = {
  nodeAffinity: {
    requiredDuringSchedulingIgnoredDuringExecution: {
      nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n'] }] }],
    },
  },
};
const catchAll = [{ operator: 'Exists' }];

t.test('a DaemonSet pod is a VM only if its template is meant for vkvm nodes', async (t) => {
  const cases: Array<[string, V1Pod, boolean]> = [
    ['tolerates every taint (kube-proxy, flannel, node-exporter)', pod({ tolerations: catchAll, affinity: daemonAffinity }), false],
    ['no toleration at all (the node has no vkvm taint)', pod({ affinity: daemonAffinity }), false],
    ['tolerates the vkvm taint by key', pod({ tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists' }] }), true],
    ['selects vkvm nodes by nodeSelector', pod({ tolerations: catchAll, nodeSelector: { type: 'virtual-kubelet' } }), true],
    [
      'selects vkvm nodes by node affinity',
      pod({
        tolerations: catchAll,
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: 'type', operator: 'In', values: ['virtual-kubelet'] }] }],
            },
          },
        },
      }),
      true,
    ],
    ["another owner's pod with a catch-all toleration", pod({ tolerations: catchAll }, 'ReplicaSet'), true],
  ];
  t.same(
    cases.map(([what, p]) => [what, daemonPodRefusal(p) === undefined]),
    cases.map(([what, , vm]) => [what, vm]),
  );
});

t.test('the node refuses it first, as NotAVirtualMachine, naming the DaemonSet and the rule', async (t) => {
  t.same(judgeAdmission(pod({ tolerations: catchAll }), { pressure: ['DiskPressure'], admitted: [] }), {
    reason: 'NotAVirtualMachine',
    message:
      "Pod was rejected: a pod of DaemonSet kube-proxy reaches this vkvm node only by tolerating every taint; vkvm runs a DaemonSet's pods as VMs only when they tolerate virtual-kubelet.io/provider by key or select type=virtual-kubelet nodes",
  });
});
