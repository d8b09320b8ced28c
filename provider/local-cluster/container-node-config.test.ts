import t from 'tap';
import { parse } from 'yaml';
import {
  bootstrapKubeconfig,
  cniConfList,
  containerdConfig,
  flannelNetConf,
  kubeletConfig,
  parseSubnetEnv,
} from './container-node-config.js';

const dirs = { rootDir: '/var/lib/vkvm/up/nodes/3', runDir: '/run/vkvm/nodes/3' };

t.test('containerd keeps everything in the node’s own dirs and runs the local pause image with cgroupfs', async (t) => {
  const toml = containerdConfig(dirs, { sandboxImage: 'localhost/vkvm/pause:v1' });
  for (const line of [
    'version = 2',
    'root = "/var/lib/vkvm/up/nodes/3/containerd"',
    'state = "/run/vkvm/nodes/3/containerd"',
    '[grpc]\naddress = "/run/vkvm/nodes/3/containerd.sock"',
    'sandbox_image = "localhost/vkvm/pause:v1"',
    'restrict_oom_score_adj = true',
    'bin_dir = "/usr/lib/cni"\nconf_dir = "/var/lib/vkvm/up/nodes/3/cni/net.d"',
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = false',
  ])
    t.ok(toml.includes(line), `has ${line}`);
  t.notMatch(toml, /\/var\/lib\/containerd|\/etc\/cni|\/opt\/cni/, 'no host-wide path');
});

t.test('the kubelet: webhook authn/authz, the node’s cgroup root and DNS, the node’s containerd', async (t) => {
  const config = parse(
    kubeletConfig(dirs, {
      clusterDns: ['10.96.0.10'],
      clusterDomain: 'cluster.local',
      cgroupRoot: '/vkvm/cnode-3/pods',
      clientCaFile: '/ca.crt',
    }),
  ) as Record<string, unknown>;
  t.match(config, {
    kind: 'KubeletConfiguration',
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: '/ca.crt' } },
    authorization: { mode: 'Webhook' },
    cgroupDriver: 'cgroupfs',
    cgroupRoot: '/vkvm/cnode-3/pods',
    clusterDNS: ['10.96.0.10'],
    containerRuntimeEndpoint: 'unix:///run/vkvm/nodes/3/containerd.sock',
    podLogsDir: '/var/lib/vkvm/up/nodes/3/pod-logs',
    readOnlyPort: 0,
  });
});

t.test('the bootstrap kubeconfig carries the token and the CA', async (t) => {
  t.match(parse(bootstrapKubeconfig({ server: 'https://192.168.250.1:6443', caData: 'Q0E=', token: 'abcdef.0123456789abcdef' })), {
    clusters: [{ cluster: { server: 'https://192.168.250.1:6443', 'certificate-authority-data': 'Q0E=' } }],
    users: [{ user: { token: 'abcdef.0123456789abcdef' } }],
  });
});

t.test('flannel’s lease becomes a bridge network on the lease’s range, never masqueraded', async (t) => {
  t.same(JSON.parse(flannelNetConf('10.244.0.0/16')), { Network: '10.244.0.0/16', EnableIPv4: true, Backend: { Type: 'host-gw' } });
  const lease = parseSubnetEnv('FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n');
  t.same(lease, { subnet: '10.244.3.0/24', mtu: 1500 });
  t.match(JSON.parse(cniConfList(dirs, lease)), {
    plugins: [
      {
        type: 'bridge',
        bridge: 'cni0',
        isGateway: true,
        isDefaultGateway: true,
        ipMasq: false,
        mtu: 1500,
        ipam: { type: 'host-local', ranges: [[{ subnet: '10.244.3.0/24' }]], dataDir: '/run/vkvm/nodes/3/cni/ipam' },
      },
      { type: 'portmap' },
    ],
  });
});

t.test('a subnet.env without a lease is refused, naming the field', async (t) => {
  t.throws(() => parseSubnetEnv('FLANNEL_MTU=1500\n'), /FLANNEL_SUBNET/);
  t.throws(() => parseSubnetEnv('FLANNEL_SUBNET=10.244.3.1/24\n'), /FLANNEL_MTU/);
});
