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

t.test("image garbage collection: the kubelet's defaults, flags, and bad values naming the flag", async (t) => {
  t.match(resolveAgentConfig({ kubeconfig: '/k' }), {
    imageGc: { highThresholdPercent: 85, lowThresholdPercent: 80, minAgeMs: 120_000 },
    imageGcPeriodMs: 300_000,
  });
  t.match(
    resolveAgentConfig({
      kubeconfig: '/k',
      'image-gc-high-threshold': '100',
      'image-gc-low-threshold': '50',
      'image-minimum-gc-age': '0s',
    }).imageGc,
    { highThresholdPercent: 100, lowThresholdPercent: 50, minAgeMs: 0 },
  );
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'image-gc-high-threshold': '101' }), {
    field: '--image-gc-high-threshold',
    message: /must be an integer in \[0, 100\]/,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'image-gc-low-threshold': '85' }), {
    field: '--image-gc-low-threshold',
    message: /must be below --image-gc-high-threshold \(85\), got 85/,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'image-minimum-gc-age': 'soon' }), {
    field: '--image-minimum-gc-age',
    message: /must be a duration such as 2m/,
  });
});

t.test('image quotas: none by default, MiB flags in bytes, bad values naming the flag', async (t) => {
  t.match(resolveAgentConfig({ kubeconfig: '/k' }), { imageStoreQuotaBytes: 0, imageCacheQuotaBytes: 0 });
  t.match(resolveAgentConfig({ kubeconfig: '/k', 'image-store-quota-mib': '10240', 'image-cache-quota-mib': '2048' }), {
    imageStoreQuotaBytes: 10240 * 2 ** 20,
    imageCacheQuotaBytes: 2048 * 2 ** 20,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'image-cache-quota-mib': '-1' }), {
    field: '--image-cache-quota-mib',
    message: /must be an integer in \[0, 1073741824\]/,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'image-store-quota-mib': '1.5G' }), {
    field: '--image-store-quota-mib',
    message: /must be an integer/,
  });
});

t.test("local registries: Docker's loopback default, the operator's, each with its port", async (t) => {
  t.same(resolveAgentConfig({ kubeconfig: '/k', 'local-registry': ['registry.node:5443', '[::1]:5001'] }).localRegistries, [
    'localhost:5000',
    '127.0.0.1:5000',
    '[::1]:5000',
    'registry.node:5443',
    '[::1]:5001',
  ]);
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'local-registry': ['127.0.0.1'] }), {
    field: '--local-registry',
    message: /needs a port: HOST:PORT/,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'local-registry': ['http://x:1'] }), {
    field: '--local-registry',
    message: /is not a registry host/,
  });
});

t.test('the watch progress deadline: two bookmark periods by default, a duration flag, bad values naming the flag', async (t) => {
  t.same(
    [resolveAgentConfig({ kubeconfig: '/k' }), resolveAgentConfig({ kubeconfig: '/k', 'watch-progress-deadline': '15s' })].map(
      (c) => c.watchProgressDeadlineMs,
    ),
    [120_000, 15_000],
  );
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'watch-progress-deadline': '10' }), {
    field: '--watch-progress-deadline',
    message: /must be a duration/,
  });
});

t.test("a node's VM cgroups and QEMU uids can be put apart from another node's on the same machine", async (t) => {
  t.match(resolveAgentConfig({ kubeconfig: '/k' }), { cgroupParent: 'vkvm', qemuUidBase: 3_000_000 }, 'defaults');
  t.match(
    resolveAgentConfig({ kubeconfig: '/k', 'cgroup-parent': 'vkvm/node-2', 'qemu-uid-base': '4000000' }),
    { cgroupParent: 'vkvm/node-2', qemuUidBase: 4_000_000 },
    'flags',
  );
  for (const bad of ['/vkvm', 'vkvm/../x', 'vkvm//x', 'a b'])
    t.throws(
      () => resolveAgentConfig({ kubeconfig: '/k', 'cgroup-parent': bad }),
      { field: '--cgroup-parent', message: /^--cgroup-parent: / },
      JSON.stringify(bad),
    );
  t.throws(
    () => resolveAgentConfig({ kubeconfig: '/k', 'qemu-uid-base': '1000' }),
    { field: '--qemu-uid-base', message: /^--qemu-uid-base: / },
    'below the default base',
  );
});

t.test('cluster DNS: looked up unless given, cluster.local by default, bad values naming the flag', async (t) => {
  const dflt = resolveAgentConfig({ kubeconfig: '/k' });
  t.equal(dflt.clusterDns, undefined, 'looked up from kube-dns');
  t.equal(dflt.clusterDomain, 'cluster.local');
  t.match(resolveAgentConfig({ kubeconfig: '/k', 'cluster-dns': '10.96.0.10, 10.96.0.11', 'cluster-domain': 'k8s.example' }), {
    clusterDns: ['10.96.0.10', '10.96.0.11'],
    clusterDomain: 'k8s.example',
  });
  for (const bad of ['', '10.96.0', 'fd00::10', '1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4'])
    t.throws(
      () => resolveAgentConfig({ kubeconfig: '/k', 'cluster-dns': bad }),
      { field: '--cluster-dns', message: /^--cluster-dns: / },
      JSON.stringify(bad),
    );
  for (const bad of ['', 'Cluster.Local', '-a.example', 'a..b'])
    t.throws(
      () => resolveAgentConfig({ kubeconfig: '/k', 'cluster-domain': bad }),
      { field: '--cluster-domain', message: /^--cluster-domain: / },
      JSON.stringify(bad),
    );
});

t.test('the migration relay port: 10262 by default, 0 turns it off, bad values name the flag', async (t) => {
  t.same(
    [undefined, '0', '20262'].map(
      (port) => resolveAgentConfig({ kubeconfig: '/k', ...(port ? { 'migration-port': port } : {}) }).migrationPort,
    ),
    [10262, 0, 20262],
  );
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'migration-port': '65536' }), {
    field: '--migration-port',
    message: /^--migration-port: must be an integer in \[0, 65535\]/,
  });
});

t.test('kube-proxy: off unless --kube-proxy=true, its binary only with it, bad values naming the flag', async (t) => {
  t.same(
    [
      resolveAgentConfig({ kubeconfig: '/k' }).kubeProxy,
      resolveAgentConfig({ kubeconfig: '/k', 'kube-proxy': 'false' }).kubeProxy,
      resolveAgentConfig({ kubeconfig: '/k', 'kube-proxy': 'true' }).kubeProxy,
      resolveAgentConfig({ kubeconfig: '/k', 'kube-proxy': 'true', 'kube-proxy-binary': '/opt/vkvm-cluster' }).kubeProxy,
    ],
    [undefined, undefined, {}, { binary: '/opt/vkvm-cluster' }],
  );
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'kube-proxy': 'yes' }), {
    field: '--kube-proxy',
    message: /true or false, got "yes"/,
  });
  t.throws(() => resolveAgentConfig({ kubeconfig: '/k', 'kube-proxy-binary': '/x' }), {
    field: '--kube-proxy-binary',
    message: /only with --kube-proxy=true/,
  });
});
