import t from 'tap';
import { parseExtSize, parseLoopDevices, parseMountPoints } from './block-devices.js';

t.test('parseLoopDevices reads losetup --json --list, a deleted backing file by its old name', async (t) => {
  const json = JSON.stringify({
    loopdevices: [
      { name: '/dev/loop0', 'back-file': '/srv/csi/volumes/vol-a.img', ro: false },
      { name: '/dev/loop1', 'back-file': '/srv/csi/volumes/vol-b.img (deleted)' },
      { name: '/dev/loop2', 'back-file': null },
    ],
  });
  t.same(parseLoopDevices(json), [
    { device: '/dev/loop0', backingFile: '/srv/csi/volumes/vol-a.img' },
    { device: '/dev/loop1', backingFile: '/srv/csi/volumes/vol-b.img' },
    { device: '/dev/loop2', backingFile: '' },
  ]);
  t.same(parseLoopDevices(''), [], 'no loop devices: losetup prints nothing');
});

t.test('parseMountPoints takes mountinfo field 5 with its octal escapes undone', async (t) => {
  const mountinfo = [
    '22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw',
    '95 22 7:0 / /var/lib/kubelet/plugins/csi\\040dir/staging rw,relatime - ext4 /dev/loop0 rw',
    '',
  ].join('\n');
  t.same([...parseMountPoints(mountinfo)], ['/', '/var/lib/kubelet/plugins/csi dir/staging']);
});

t.test('parseExtSize: block count times block size from dumpe2fs -h; undefined when either is missing', async (t) => {
  const header =
    'Filesystem volume name:   <none>\nBlock count:              16384\nReserved block count:     819\nBlock size:               4096\n';
  t.same([parseExtSize(header), parseExtSize('Block count: 10\n')], [16384 * 4096, undefined]);
});
