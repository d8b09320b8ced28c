import t from 'tap';
import { QEMU_UID_BASE, QEMU_UID_COUNT } from '../launchers/qemu-uids.js';
import { localNodes, parseNodeCount, segmentOf } from './layout.js';

t.test('nodes 2..N: names, addresses, namespaces, directories, cgroups and uid ranges follow from the index', async (t) => {
  const segment = segmentOf('192.168.250.0/24');
  t.match(
    segment,
    { bridge: 'vkvm-nodes', hostAddress: '192.168.250.1', range: { cidr: '192.168.250.0/24' } },
    'the host takes the first address',
  );
  const nodes = localNodes({ count: 3, node1: 'box', segment, upStateDir: '/var/lib/vkvm', upRunDir: '/run/vkvm' });
  t.same(
    nodes.map((n) => [n.name, n.address, n.netns, n.hostVeth, n.stateDir, n.runDir, n.cgroupParent, n.qemuUidBase]),
    [
      [
        'box-2',
        '192.168.250.2',
        'vkvm-node-2',
        'vkvmnode2',
        '/var/lib/vkvm/nodes/2',
        '/run/vkvm/nodes/2',
        'vkvm/node-2',
        QEMU_UID_BASE + QEMU_UID_COUNT,
      ],
      [
        'box-3',
        '192.168.250.3',
        'vkvm-node-3',
        'vkvmnode3',
        '/var/lib/vkvm/nodes/3',
        '/run/vkvm/nodes/3',
        'vkvm/node-3',
        QEMU_UID_BASE + 2 * QEMU_UID_COUNT,
      ],
    ],
    'stable for the same state dir and node 1 name',
  );
  t.same(localNodes({ count: 1, node1: 'box', segment, upStateDir: '/s', upRunDir: '/r' }), [], 'one node: only this host');
});

t.test('bad --nodes and --nodes-cidr name the flag', async (t) => {
  t.equal(parseNodeCount(undefined), 1, 'default 1');
  for (const bad of ['0', '65', '1.5', 'two']) t.throws(() => parseNodeCount(bad), { field: '--nodes', message: /^--nodes: / }, bad);
  t.throws(() => segmentOf('192.168.250.0/30'), { field: '--nodes-cidr', message: /too small/ });
  t.throws(() => segmentOf('nope'), { field: '--nodes-cidr', message: /not a CIDR/ });
  t.throws(() => localNodes({ count: 9, node1: 'box', segment: segmentOf('10.0.0.0/29'), upStateDir: '/s', upRunDir: '/r' }), {
    field: '--nodes',
    message: /do not fit/,
  });
});
