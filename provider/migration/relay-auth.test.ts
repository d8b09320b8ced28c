import t from 'tap';
import { authorizeStream, nodeOfCertificate, type StreamAuthInput } from './relay-auth.js';

const UID = 'm-1';
const NODE_A = { CN: 'system:node:a', O: 'system:nodes' };
const allowed: StreamAuthInput = {
  peer: NODE_A,
  selfNode: 'b',
  header: { uid: UID, kind: 'memory' },
  facts: {
    migrationState: { migrationUid: UID, sourceNode: 'a', targetNode: 'b' },
    targetPod: { vmDir: '/var/lib/vkvm/vms/pod-uid' },
  },
  ready: true,
};
const NOT_NODE = "the client certificate is not a node's (want CN system:node:<name>, O system:nodes)";
const withState = (s: object): StreamAuthInput => ({
  ...allowed,
  facts: { ...allowed.facts, migrationState: { ...allowed.facts.migrationState, ...s } },
});

t.test('a stream of a running migration, from its source to its target, goes to its socket', async (t) => {
  t.same(
    (['libvirt', 'memory', 'disk', 'control'] as const).map((kind) => authorizeStream({ ...allowed, header: { uid: UID, kind } })),
    [
      { accept: true, peerNode: 'a', to: { kind: 'socket', path: '/var/lib/vkvm/vms/pod-uid/libvirt/run/libvirt-sock' } },
      { accept: true, peerNode: 'a', to: { kind: 'socket', path: '/var/lib/vkvm/vms/pod-uid/libvirt/run/m/mem' } },
      { accept: true, peerNode: 'a', to: { kind: 'socket', path: '/var/lib/vkvm/vms/pod-uid/libvirt/run/m/nbd' } },
      { accept: true, peerNode: 'a', to: { kind: 'control' } },
    ],
  );
  t.same(authorizeStream({ ...allowed, ready: false, header: { uid: UID, kind: 'control' } }), {
    accept: true,
    peerNode: 'a',
    to: { kind: 'control' },
  });
});

t.test('every refusal says why', async (t) => {
  const rows: [string, StreamAuthInput, string][] = [
    ['no client certificate', { ...allowed, peer: undefined }, NOT_NODE],
    ['not a node cert', { ...allowed, peer: { CN: 'admin', O: 'system:masters' } }, NOT_NODE],
    ['a node name outside system:nodes', { ...allowed, peer: { CN: 'system:node:a', O: 'tenants' } }, NOT_NODE],
    ['two CNs', { ...allowed, peer: { CN: ['system:node:a', 'system:node:c'], O: 'system:nodes' } }, NOT_NODE],
    [
      'unknown uid: no target pod',
      { ...allowed, facts: { ...allowed.facts, targetPod: undefined } },
      'no pod on node b is the target of migration m-1',
    ],
    [
      'unknown uid: no VMI',
      { ...allowed, facts: { ...allowed.facts, migrationState: undefined } },
      "the VMI's migrationState does not name migration m-1",
    ],
    ['unknown uid: another migration', withState({ migrationUid: 'm-0' }), "the VMI's migrationState does not name migration m-1"],
    ['wrong peer', { ...allowed, peer: { CN: 'system:node:c', O: ['system:nodes'] } }, 'migration m-1 runs from node a, not from c'],
    ['no source yet', withState({ sourceNode: undefined }), 'migration m-1 runs from node (none), not from a'],
    ['wrong target', { ...allowed, selfNode: 'c' }, 'migration m-1 runs to node b, not to c'],
    ['finished: completed', withState({ completed: true }), 'migration m-1 has completed'],
    ['finished: failed', withState({ failed: true }), 'migration m-1 has failed'],
    [
      'libvirt too early',
      { ...allowed, ready: false, header: { uid: UID, kind: 'libvirt' } },
      'a libvirt stream of migration m-1 before the target is ready',
    ],
    ['memory too early', { ...allowed, ready: false }, 'a memory stream of migration m-1 before the target is ready'],
    [
      'disk too early',
      { ...allowed, ready: false, header: { uid: UID, kind: 'disk' } },
      'a disk stream of migration m-1 before the target is ready',
    ],
  ];
  for (const [what, input, reason] of rows) t.same(authorizeStream(input), { accept: false, reason }, what);
});

t.test('the node a certificate names', async (t) => {
  t.same(
    [
      nodeOfCertificate({ CN: 'system:node:worker-1', O: 'system:nodes' }),
      nodeOfCertificate({ CN: 'system:node:worker-1', O: ['other', 'system:nodes'] }),
      nodeOfCertificate({ CN: 'system:node:', O: 'system:nodes' }),
      nodeOfCertificate({ CN: 'worker-1', O: 'system:nodes' }),
      nodeOfCertificate({ O: 'system:nodes' }),
      nodeOfCertificate(undefined),
    ],
    ['worker-1', 'worker-1', undefined, undefined, undefined, undefined],
  );
});
