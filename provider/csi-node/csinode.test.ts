import t from 'tap';
import { csiNodeDiffers, csiNodeDriver, desiredCsiNode } from './csinode.js';
import type { NodeInfo } from './driver-client.js';

t.test('csiNodeDriver: NodeGetInfo as a CSINode entry', async (t) => {
  const cases: Array<{ name: string; info: NodeInfo; want: object }> = [
    {
      name: 'topology and no limit (vkvm csi)',
      info: { nodeId: 'node-a', maxVolumesPerNode: 0, accessibleTopology: { segments: { 'topology.vkvm.io/node': 'node-a' } } },
      want: { name: 'csi.vkvm.io', nodeID: 'node-a', topologyKeys: ['topology.vkvm.io/node'] },
    },
    {
      name: 'a limit, no topology',
      info: { nodeId: 'i-123', maxVolumesPerNode: 39, accessibleTopology: null },
      want: { name: 'csi.vkvm.io', nodeID: 'i-123', allocatable: { count: 39 } },
    },
    {
      name: 'several keys, sorted',
      info: { nodeId: 'n', maxVolumesPerNode: 0, accessibleTopology: { segments: { zone: 'z1', 'a/rack': 'r1' } } },
      want: { name: 'csi.vkvm.io', nodeID: 'n', topologyKeys: ['a/rack', 'zone'] },
    },
  ];
  t.same(
    cases.map((c) => csiNodeDriver('csi.vkvm.io', c.info)),
    cases.map((c) => c.want),
  );
});

t.test('desiredCsiNode is owned by the Node and lists its drivers by name', async (t) => {
  t.same(
    desiredCsiNode({ name: 'node-a', uid: 'u1' }, [
      { name: 'z.io', nodeID: 'a' },
      { name: 'a.io', nodeID: 'a' },
    ]),
    {
      apiVersion: 'storage.k8s.io/v1',
      kind: 'CSINode',
      metadata: { name: 'node-a', ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'node-a', uid: 'u1' }] },
      spec: {
        drivers: [
          { name: 'a.io', nodeID: 'a' },
          { name: 'z.io', nodeID: 'a' },
        ],
      },
    },
  );
});

t.test('csiNodeDiffers: only a change of drivers or owner is a write', async (t) => {
  const want = desiredCsiNode({ name: 'n', uid: 'u1' }, [{ name: 'csi.vkvm.io', nodeID: 'n', topologyKeys: ['k'] }]);
  const found = (edit: (c: typeof want) => void) => {
    const c = structuredClone(want);
    c.metadata!.resourceVersion = '7';
    edit(c);
    return c;
  };
  t.same(
    [
      csiNodeDiffers(undefined, want),
      csiNodeDiffers(
        found(() => undefined),
        want,
      ),
      csiNodeDiffers(
        found((c) => (c.spec.drivers = [])),
        want,
      ),
      csiNodeDiffers(
        found((c) => (c.spec.drivers[0]!.nodeID = 'other')),
        want,
      ),
      csiNodeDiffers(
        found((c) => (c.metadata!.ownerReferences = [])),
        want,
      ),
    ],
    [true, false, true, true, true],
  );
});
