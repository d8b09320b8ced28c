// What `vkvm up` with container nodes could leave on this machine: the leak
// audit's kinds (leftovers.ts) plus links, routes, network namespaces, mounts,
// kube-proxy's rules, loop devices and a container node's daemons and pods'
// processes.
import { basename } from 'node:path';
import { run } from '../../provider/network/host.js';
import { hostFootprint, type Footprint } from './leftovers.js';
import { argvOf, pidsWhere } from './processes.js';

/** What a container node could leave: the leak audit's kinds plus links, routes, namespaces, mounts and its daemons. */
export async function machineFootprint(up: { stateDir: string; bridge: string }): Promise<Footprint> {
  const {
    file: _files,
    'IPAM address': _leases,
    'DHCP lease': _dhcp,
    ...kinds
  } = await hostFootprint({
    stateDir: up.stateDir,
    runDir: '/run/vkvm',
    bridge: up.bridge,
  });
  const lines = async (argv: string[], keep: (l: string) => boolean) => (await run(argv)).split('\n').filter(keep).sort();
  return {
    ...kinds,
    link: await lines(['ip', '-o', 'link', 'show'], (l) => /vkvm|vh[0-9a-f]{12}|cni0|veth/.test(l)).then((ls) =>
      ls.map((l) => l.split(':')[1]!.trim()),
    ),
    route: await lines(['ip', '-4', 'route', 'show'], Boolean),
    'network namespace (any)': await lines(['ip', 'netns', 'list'], Boolean).then((ls) => ls.map((l) => l.split(' ')[0]!)),
    mount: await lines(
      ['cat', '/proc/self/mountinfo'],
      (l) => /containerd|kubelet|vkvm-cnode|\/run\/netns\/cni-/.test(l) || l.includes(` ${up.stateDir}/`),
    ),
    // A CSI Block volume's, or a filesystem's staged by a driver; global, so a simulated host's outlive it.
    'loop device': await lines(['losetup', '--noheadings', '--output', 'BACK-FILE', '--list'], Boolean),
    // kube-proxy's, in this host's namespace (node 1's; the other nodes' go with their namespaces, counted above).
    'kube-proxy rule': [
      ...(await lines(['iptables-save'], (l) => /KUBE-/.test(l))),
      ...(await lines(['ip6tables-save'], (l) => /KUBE-/.test(l))),
      ...(await lines(['nft', 'list', 'tables'], (l) => /kube-proxy/.test(l))),
    ],
    'container daemon': pidsWhere(isContainerNodeProcess).map((p) => argvOf(p).join(' ').slice(0, 120)),
  };
}

/** containerd, its shims, the kubelet, flanneld, kube-proxy, CoreDNS, and the pods' processes (pause, the toolbox's httpd). */
function isContainerNodeProcess(argv: string[]): boolean {
  const exe = basename(argv[0] ?? '');
  if (['containerd', 'containerd-shim-runc-v2', 'runc', 'pause', '/pause', 'coredns'].includes(exe)) return true;
  if (exe === 'vkvm-cluster') return ['kubelet', 'flanneld', 'kube-proxy'].includes(argv[1] ?? '');
  return exe === 'httpd' && argv.includes('/www');
}
