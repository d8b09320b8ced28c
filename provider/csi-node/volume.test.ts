import { createHash } from 'node:crypto';
import t from 'tap';
import {
  accessModeOf,
  diskPath,
  publishPath,
  publishRecordPath,
  stagingPath,
  stagingRecordPath,
  volumeAttachmentName,
  volumeCapability,
} from './volume.js';

const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const fs = { driver: 'csi.vkvm.io', volumeHandle: 'vol-1', volumeMode: 'Filesystem' as const, pvName: 'pv-1' };
const block = { ...fs, volumeMode: 'Block' as const };

t.test("the kubelet's paths under the agent's state directory", async (t) => {
  t.same(
    {
      staging: stagingPath('/var/lib/vkvm', fs),
      stagingRecord: stagingRecordPath('/var/lib/vkvm', fs),
      blockStaging: stagingPath('/var/lib/vkvm', block),
      blockStagingRecord: stagingRecordPath('/var/lib/vkvm', block),
      escapedDriver: stagingPath('/s', { ...fs, driver: 'example.com/driver' }),
      publish: publishPath('/var/lib/vkvm', 'uid-1', fs),
      publishRecord: publishRecordPath('/var/lib/vkvm', 'uid-1', 'pv-1'),
      blockPublish: publishPath('/var/lib/vkvm', 'uid-1', block),
      disk: diskPath('/var/lib/vkvm', 'uid-1', fs),
      blockDisk: diskPath('/var/lib/vkvm', 'uid-1', block),
    },
    {
      staging: `/var/lib/vkvm/plugins/kubernetes.io/csi/csi.vkvm.io/${sha('vol-1')}/globalmount`,
      stagingRecord: `/var/lib/vkvm/plugins/kubernetes.io/csi/csi.vkvm.io/${sha('vol-1')}/vol_data.json`,
      blockStaging: '/var/lib/vkvm/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1',
      blockStagingRecord: '/var/lib/vkvm/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1.vol_data.json',
      escapedDriver: `/s/plugins/kubernetes.io/csi/example.com~driver/${sha('vol-1')}/globalmount`,
      publish: '/var/lib/vkvm/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount',
      publishRecord: '/var/lib/vkvm/pods/uid-1/volumes/kubernetes.io~csi/pv-1/vol_data.json',
      blockPublish: '/var/lib/vkvm/pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1',
      disk: '/var/lib/vkvm/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount/disk.img',
      blockDisk: '/var/lib/vkvm/pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1',
    },
  );
});

t.test("the VolumeAttachment's name is the attach/detach controller's", async (t) => {
  t.equal(volumeAttachmentName('vol-1', 'csi.vkvm.io', 'node-a'), `csi-${sha('vol-1csi.vkvm.ionode-a')}`);
});

t.test('access modes and capabilities', async (t) => {
  const modes: Array<[string[], string]> = [
    [['ReadWriteOnce'], 'SINGLE_NODE_WRITER'],
    [['ReadWriteOncePod'], 'SINGLE_NODE_WRITER'],
    [['ReadOnlyMany'], 'MULTI_NODE_READER_ONLY'],
    [['ReadWriteOnce', 'ReadOnlyMany'], 'SINGLE_NODE_WRITER'],
    [['ReadWriteMany'], 'MULTI_NODE_MULTI_WRITER'],
    [[], 'SINGLE_NODE_WRITER'],
  ];
  t.same(
    modes.map(([m]) => accessModeOf(m)),
    modes.map(([, want]) => want),
  );
  t.same(volumeCapability({ volumeMode: 'Filesystem', fsType: 'ext4', accessMode: 'SINGLE_NODE_WRITER' }), {
    mount: { fsType: 'ext4', mountFlags: [] },
    accessMode: { mode: 'SINGLE_NODE_WRITER' },
  });
  t.same(volumeCapability({ volumeMode: 'Block', accessMode: 'SINGLE_NODE_WRITER' }), {
    block: {},
    accessMode: { mode: 'SINGLE_NODE_WRITER' },
  });
});
