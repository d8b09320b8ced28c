import t from 'tap';
import type { VmSpec } from '../vmm/spec.js';
import { InvalidArgumentError } from './errors.js';
import { checkDiskResize } from './disk-resize.js';

const spec = {
  disks: [
    { name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'image', path: '/images/root.qcow2' } },
    { name: 'data', device: 'disk', bus: 'virtio', source: { kind: 'host', path: '/var/lib/vkvm/pods/u/volumes/pv/mount/disk.img' } },
  ],
} as unknown as VmSpec;
const DATA = '/var/lib/vkvm/pods/u/volumes/pv/mount/disk.img';

t.test('checkDiskResize: only a disk used in place, only larger', async (t) => {
  const cases: Array<[string, VmSpec | undefined, string, number | undefined, number, string]> = [
    ['larger', spec, DATA, 100, 200, 'ok'],
    ['the same size: asked again (a retry, or a device libvirt already sees larger)', spec, DATA, 200, 200, 'ok'],
    ['size unknown', spec, DATA, undefined, 200, 'ok'],
    ['smaller: refused, never shrinks', spec, DATA, 200, 100, 'sizeBytes'],
    ['an overlaid image: refused', spec, '/images/root.qcow2', 100, 200, 'path'],
    ['no such disk', spec, '/elsewhere', 100, 200, 'path'],
    ['no VM spec', undefined, DATA, 100, 200, 'path'],
    ['zero size', spec, DATA, 100, 0, 'sizeBytes'],
  ];
  t.same(
    cases.map(([, s, path, current, size]) => {
      try {
        checkDiskResize(s, path, current, size);
        return 'ok';
      } catch (err) {
        return err instanceof InvalidArgumentError ? err.fieldPaths.join() : String(err);
      }
    }),
    cases.map((c) => c[5]),
    cases.map((c) => c[0]).join('; '),
  );
});
