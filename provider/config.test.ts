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
  const c = resolveAgentConfig({
    kubeconfig: '/k',
    label: ['zone=a', 'gpu'],
    taint: ['virtual-kubelet.io/provider=qemu:NoExecute', 'x:NoSchedule'],
  });
  t.same(c.extraLabels, { zone: 'a', gpu: '' });
  t.same(c.taints, [
    { key: 'virtual-kubelet.io/provider', value: 'qemu', effect: 'NoExecute' },
    { key: 'x', effect: 'NoSchedule' },
  ]);
  t.same(resolveAgentConfig({ kubeconfig: '/k', 'no-default-taint': true }).taints, []);
});

t.test('the kubeconfig is --kubeconfig, else $KUBECONFIG', async (t) => {
  t.equal(resolveAgentConfig({}, { KUBECONFIG: '/env.conf' }).kubeconfigPath, '/env.conf');
  t.equal(resolveAgentConfig({ kubeconfig: '/flag.conf' }, { KUBECONFIG: '/env.conf' }).kubeconfigPath, '/flag.conf');
});

t.test('bad input names the flag', async (t) => {
  t.throws(() => resolveAgentConfig({}, {}), new ConfigError('--kubeconfig', 'is required (or set $KUBECONFIG)'));
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'kubelet-port': '70000' }), {
    field: '--kubelet-port',
    message: /^--kubelet-port: /,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'node-name': 'bad_name' }), { field: '--node-name', message: /^--node-name: / });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'internal-ip': 'x' }), { field: '--internal-ip', message: /^--internal-ip: / });
  t.throws(() => parseTaint('k=v:Sometimes'), { field: '--taint', message: /^--taint: / });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', label: ['-bad=1'] }), { field: '--label', message: /^--label: / });
});

t.test('streaming session caps and idle timeout: defaults, flags, and bad values naming the flag', async (t) => {
  t.match(resolveAgentConfig({ kubeconfig: '/k' }), {
    sessionLimits: { perNode: 256, perUser: 128 },
    streamingIdleTimeoutMs: 4 * 3_600_000,
  });
  t.match(
    resolveAgentConfig({
      kubeconfig: '/k',
      'max-streaming-sessions': '20',
      'max-streaming-sessions-per-user': '5',
      'streaming-connection-idle-timeout': '1h30m',
    }),
    { sessionLimits: { perNode: 20, perUser: 5 }, streamingIdleTimeoutMs: 5_400_000 },
  );
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'max-streaming-sessions': '0' }), {
    field: '--max-streaming-sessions',
    message: /must be an integer/,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'max-streaming-sessions-per-user': 'many' }), {
    field: '--max-streaming-sessions-per-user',
    message: /must be an integer/,
  });
  for (const bad of ['4', '500ms', '1.5h', '600h']) {
    t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'streaming-connection-idle-timeout': bad }), {
      field: '--streaming-connection-idle-timeout',
      message: /must be a duration from 1s to 596h such as 4h, 30m or 90s/,
    });
  }
});
