import t from 'tap';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { claimOnNode } from './claims.js';

const claim: V1PersistentVolumeClaim = {
  metadata: { name: 'data', namespace: 'tenant' },
  spec: { volumeName: 'pv-1' },
  status: { phase: 'Bound', capacity: { storage: '1Gi' } },
};
const pv = (spec: V1PersistentVolume['spec']): V1PersistentVolume => ({ metadata: { name: 'pv-1' }, spec });

t.test('a local or hostPath PV is a path on the node; any other PV is refused with its kind', async (t) => {
  t.same(
    [
      claimOnNode(claim, pv({ local: { path: '/mnt/disks/a' }, volumeMode: 'Block' })),
      claimOnNode(claim, pv({ hostPath: { path: '/srv/pv' } })),
      claimOnNode(claim, pv({ csi: { driver: 'hostpath.csi.k8s.io', volumeHandle: 'v-1' } })),
      claimOnNode(claim, pv({ nfs: { server: 'nas', path: '/export' } })),
    ],
    [
      { hostPath: '/mnt/disks/a', volumeMode: 'Block', capacity: '1Gi' },
      { hostPath: '/srv/pv', volumeMode: 'Filesystem', capacity: '1Gi' },
      {
        unservable:
          'claim "data" is bound to PersistentVolume pv-1, a CSI volume of driver hostpath.csi.k8s.io: vkvm serves VM disks from local and hostPath volumes only',
      },
      {
        unservable:
          'claim "data" is bound to PersistentVolume pv-1, neither local nor hostPath: vkvm serves VM disks from local and hostPath volumes only',
      },
    ],
  );
});
