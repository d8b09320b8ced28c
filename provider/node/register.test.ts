import t from 'tap';
import { mergeTaints } from './register.js';

t.test('our taints replace same key+effect; taints of other components stay', async (t) => {
  const existing = [
    { key: 'virtual-kubelet.io/provider', value: 'old', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' },
  ];
  t.same(mergeTaints(existing, [{ key: 'virtual-kubelet.io/provider', value: 'kvm', effect: 'NoSchedule' }]), [
    { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' },
    { key: 'virtual-kubelet.io/provider', value: 'kvm', effect: 'NoSchedule' },
  ]);
});
