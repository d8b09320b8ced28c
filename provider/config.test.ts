import t from 'tap';
import { ConfigError, parseTaint, resolveAgentConfig } from './config.js';

t.test('defaults add the provider taint and name the node after the host', async (t) => {
  const c = resolveAgentConfig({ kubeconfig: '/k', 'node-name': 'Host-A' });
  t.match(c, {
    nodeName: 'host-a',
    kubeletPort: 10250,
    taints: [{ key: 'virtual-kubelet.io/provider', value: 'kvm', effect: 'NoSchedule' }],
    leaseDurationS: 40,
    leaseRenewIntervalS: 10,
  });
});

t.test('extra labels and taints are parsed; the default taint can be replaced', async (t) => {
  const c = resolveAgentConfig({ kubeconfig: '/k', label: ['zone=a', 'gpu'], taint: ['virtual-kubelet.io/provider=qemu:NoExecute', 'x:NoSchedule'] });
  t.same(c.extraLabels, { zone: 'a', gpu: '' });
  t.same(c.taints, [
    { key: 'virtual-kubelet.io/provider', value: 'qemu', effect: 'NoExecute' },
    { key: 'x', effect: 'NoSchedule' },
  ]);
  t.same(resolveAgentConfig({ kubeconfig: '/k', 'no-default-taint': true }).taints, []);
});

t.test('bad input names the flag', async (t) => {
  t.throws(() => resolveAgentConfig({}), new ConfigError('--kubeconfig', 'is required'));
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'kubelet-port': '70000' }), { field: '--kubelet-port', message: /^--kubelet-port: / });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'node-name': 'bad_name' }), { field: '--node-name', message: /^--node-name: / });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'internal-ip': 'x' }), { field: '--internal-ip', message: /^--internal-ip: / });
  t.throws(() => parseTaint('k=v:Sometimes'), { field: '--taint', message: /^--taint: / });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', label: ['-bad=1'] }), { field: '--label', message: /^--label: / });
});
