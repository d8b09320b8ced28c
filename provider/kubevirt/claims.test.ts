import t from 'tap';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { claimOnNode } from './claims.js';
import type { CsiVolume } from '../csi-node/volume.js';

const claim: V1PersistentVolumeClaim = {
  metadata: { name: 'data', namespace: 'tenant' },
  spec: { volumeName: 'pv-1' },
  status: { phase: 'Bound', capacity: { storage: '1Gi' } },
};
const pv = (spec: V1PersistentVolume['spec']): V1PersistentVolume => ({ metadata: { name: 'pv-1' }, spec });
const place = (v: CsiVolume): string => `/state/pods/uid-1/${v.volumeMode}/${v.pvName}`;

t.test(
  'a local or hostPath PV is a path on the node, a CSI one (either mode) is published for the pod, any other is refused',
  async (t) => {
    t.same(
      [
        claimOnNode(claim, pv({ local: { path: '/mnt/disks/a' }, volumeMode: 'Block' }), place),
        claimOnNode(claim, pv({ hostPath: { path: '/srv/pv' } }), place),
        claimOnNode(
          claim,
          pv({
            csi: {
              driver: 'csi.vkvm.io',
              volumeHandle: 'vol-1',
              fsType: 'ext4',
              volumeAttributes: { 'vkvm.io/mode': 'filesystem' },
              nodeStageSecretRef: { name: 'stage-creds', namespace: 'storage' },
            },
            accessModes: ['ReadWriteOnce'],
          }),
          place,
        ),
        claimOnNode(claim, pv({ csi: { driver: 'csi.vkvm.io', volumeHandle: 'vol-2', readOnly: true }, volumeMode: 'Block' }), place),
        claimOnNode(claim, pv({ csi: { driver: 'csi.vkvm.io', volumeHandle: '' } }), place),
        claimOnNode(claim, pv({ nfs: { server: 'nas', path: '/export' } }), place),
      ],
      [
        { kind: 'hostPath', hostPath: '/mnt/disks/a', volumeMode: 'Block', capacity: '1Gi' },
        { kind: 'hostPath', hostPath: '/srv/pv', volumeMode: 'Filesystem', capacity: '1Gi' },
        {
          kind: 'csi',
          volume: {
            pvName: 'pv-1',
            driver: 'csi.vkvm.io',
            volumeHandle: 'vol-1',
            volumeAttributes: { 'vkvm.io/mode': 'filesystem' },
            volumeMode: 'Filesystem',
            fsType: 'ext4',
            accessMode: 'SINGLE_NODE_WRITER',
            readOnly: false,
            nodeStageSecretRef: { name: 'stage-creds', namespace: 'storage' },
          },
          diskPath: '/state/pods/uid-1/Filesystem/pv-1',
          volumeMode: 'Filesystem',
          capacity: '1Gi',
        },
        {
          kind: 'csi',
          volume: {
            pvName: 'pv-1',
            driver: 'csi.vkvm.io',
            volumeHandle: 'vol-2',
            volumeAttributes: {},
            volumeMode: 'Block',
            accessMode: 'SINGLE_NODE_WRITER',
            readOnly: true,
          },
          diskPath: '/state/pods/uid-1/Block/pv-1',
          volumeMode: 'Block',
          capacity: '1Gi',
        },
        { unservable: 'PersistentVolume pv-1 names no CSI driver or volumeHandle (spec.csi.driver, spec.csi.volumeHandle)' },
        {
          unservable:
            'claim "data" is bound to PersistentVolume pv-1, neither local, hostPath nor CSI: vkvm serves VM disks from those only',
        },
      ],
    );
  },
);
