import { execFileSync } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { SpecError } from './errors.js';
import { NO_HOST_FILES, persistentVolumeDirs, resolveHostFiles, type HostFilePolicy } from './host-files.js';
import type { DiskSource, VmSpec } from './spec.js';
import { testSpec } from './testing/specs.js';

const spec = (sources: DiskSource[], kernelBoot?: VmSpec['kernelBoot']): VmSpec =>
  testSpec({
    disks: sources.map((source, i) => ({ name: `d${i}`, device: 'disk', bus: 'virtio', source })),
    ...(kernelBoot ? { kernelBoot } : {}),
  });

/** The causes a spec is refused with, as [path, reason] pairs; [] when it passes. */
async function refusals(s: VmSpec, policy: HostFilePolicy): Promise<[string, string][]> {
  try {
    await resolveHostFiles(s, policy);
    return [];
  } catch (err) {
    if (!(err instanceof SpecError)) throw err;
    return err.causes.map((c) => [c.path, c.reason]);
  }
}

const root = t.testdir({
  images: { 'disk.qcow2': 'qcow2', vmlinuz: 'kernel', state: { kubeconfig: 'secret' } },
  disks: {},
  private: { 'ca.key': 'secret' },
});
const images = join(root, 'images');
const disks = join(root, 'disks');
symlinkSync(join(root, 'private', 'ca.key'), join(images, 'escape.qcow2'));
symlinkSync(join(images, 'disk.qcow2'), join(images, 'alias.qcow2'));
symlinkSync('/dev/null', join(images, 'null.img'));
symlinkSync(join(root, 'private', 'ca.key'), join(disks, 'swap.img'));
mkdirSync(join(images, 'fifo-dir'));
execFileSync('mkfifo', [join(images, 'fifo-dir', 'pipe')]);
writeFileSync(join(disks, 'data.img'), '');
const policy: HostFilePolicy = { imageDirs: [images], hostDiskDirs: [disks], deniedDirs: [join(images, 'state')] };

t.test('files under the listed directories resolve to their real paths', async (t) => {
  const s = spec(
    [
      { kind: 'image', path: join(images, 'alias.qcow2') },
      { kind: 'host', path: join(disks, 'data.img') },
      { kind: 'host', path: join(disks, 'new.img'), createSizeMiB: 16 },
    ],
    { kernelPath: join(images, 'vmlinuz') },
  );
  const resolved = await resolveHostFiles(s, policy);
  t.same(
    [resolved.disks.map((d) => (d.source as { path: string }).path), resolved.kernelBoot?.kernelPath],
    [[join(images, 'disk.qcow2'), join(disks, 'data.img'), join(disks, 'new.img')], join(images, 'vmlinuz')],
    'a symlink inside an allowed directory to a file inside it is used by its target; a DiskOrCreate file may be missing',
  );
});

t.test('what a tenant must not reach is refused, naming the field', async (t) => {
  const attempts: [string, VmSpec, [string, string][]][] = [
    ['a file outside the lists', spec([{ kind: 'image', path: '/etc/shadow' }]), [['disks[0].source.path', 'FieldValueForbidden']]],
    ['a ../ escape', spec([{ kind: 'image', path: `${images}/../private/ca.key` }]), [['disks[0].source.path', 'FieldValueInvalid']]],
    ['a relative path', spec([{ kind: 'image', path: 'images/disk.qcow2' }]), [['disks[0].source.path', 'FieldValueInvalid']]],
    [
      'a symlink out of an allowed directory',
      spec([{ kind: 'image', path: join(images, 'escape.qcow2') }]),
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'a device node through a symlink',
      spec([{ kind: 'image', path: join(images, 'null.img') }]),
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    ['a device node by name', spec([{ kind: 'image', path: '/dev/sda' }]), [['disks[0].source.path', 'FieldValueForbidden']]],
    ['a FIFO', spec([{ kind: 'image', path: join(images, 'fifo-dir', 'pipe') }]), [['disks[0].source.path', 'FieldValueForbidden']]],
    ['a directory', spec([{ kind: 'image', path: join(images, 'fifo-dir') }]), [['disks[0].source.path', 'FieldValueForbidden']]],
    [
      "vkvm's own directory inside an allowed one",
      spec([{ kind: 'image', path: join(images, 'state', 'kubeconfig') }]),
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'a kernel and initrd outside the lists',
      spec([], { kernelPath: '/boot/vmlinuz', initrdPath: '/etc/shadow' }),
      [
        ['kernelBoot.kernelPath', 'FieldValueForbidden'],
        ['kernelBoot.initrdPath', 'FieldValueForbidden'],
      ],
    ],
    ['a hostDisk outside its list', spec([{ kind: 'host', path: '/usr/sbin/sshd' }]), [['disks[0].source.path', 'FieldValueForbidden']]],
    [
      'a hostDisk in the image list only',
      spec([{ kind: 'host', path: join(images, 'disk.qcow2') }]),
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'a DiskOrCreate over a planted symlink',
      spec([{ kind: 'host', path: join(disks, 'swap.img'), createSizeMiB: 16 }]),
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'a missing image (retried as a pull)',
      spec([{ kind: 'image', path: join(images, 'later.qcow2') }]),
      [['disks[0].source.path', 'FieldValueNotFound']],
    ],
  ];
  for (const [what, s, want] of attempts) t.same(await refusals(s, policy), want, what);
});

t.test('with no lists, no host file at all; PersistentVolume disks are the administrator’s', async (t) => {
  t.same(await refusals(spec([{ kind: 'image', path: join(images, 'disk.qcow2') }]), NO_HOST_FILES), [
    ['disks[0].source.path', 'FieldValueForbidden'],
  ]);
  t.same(
    await refusals(spec([{ kind: 'host', path: join(disks, 'data.img') }]), NO_HOST_FILES),
    [['disks[0].source.path', 'FieldValueForbidden']],
    'hostDisk is off',
  );
  t.same(
    await refusals(spec([{ kind: 'host', path: '/dev/vg0/lv', fromPersistentVolume: true }]), NO_HOST_FILES),
    [],
    'a PV path passes as it is',
  );
});

t.test("the image store's files pass only with the agent's marker, and only inside the store", async (t) => {
  const store = join(root, 'state', 'images');
  mkdirSync(join(store, 'files', 'abc'), { recursive: true });
  writeFileSync(join(store, 'files', 'abc', 'disk'), 'qcow2');
  writeFileSync(join(store, 'files', 'abc', 'vmlinuz'), 'kernel');
  symlinkSync(join(root, 'private', 'ca.key'), join(store, 'files', 'abc', 'planted'));
  const withStore: HostFilePolicy = { ...policy, deniedDirs: [join(root, 'state')], imageStoreDir: store };
  const disk = join(store, 'files', 'abc', 'disk');
  const resolved = await resolveHostFiles(
    spec([{ kind: 'image', path: disk, fromImageStore: true }], {
      kernelPath: join(store, 'files', 'abc', 'vmlinuz'),
      initrdPath: disk,
      fromImageStore: true,
    }),
    withStore,
  );
  t.same(
    [(resolved.disks[0]!.source as { path: string }).path, resolved.kernelBoot?.kernelPath],
    [disk, join(store, 'files', 'abc', 'vmlinuz')],
    'marked files inside the store pass',
  );
  const attempts: [string, VmSpec, HostFilePolicy, [string, string][]][] = [
    [
      'the marker on a file outside the store',
      spec([{ kind: 'image', path: '/etc/shadow', fromImageStore: true }]),
      withStore,
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'the marker on a symlink in the store that leads out',
      spec([{ kind: 'image', path: join(store, 'files', 'abc', 'planted'), fromImageStore: true }]),
      withStore,
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'the marker on a ../ escape',
      spec([{ kind: 'image', path: `${store}/../../private/ca.key`, fromImageStore: true }]),
      withStore,
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'the marker without a store in the policy',
      spec([{ kind: 'image', path: disk, fromImageStore: true }]),
      policy,
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'a store file without the marker (inside a denied directory)',
      spec([{ kind: 'image', path: disk }]),
      { ...withStore, imageDirs: [root] },
      [['disks[0].source.path', 'FieldValueForbidden']],
    ],
    [
      'a kernel marked but outside the store',
      spec([], { kernelPath: '/boot/vmlinuz', fromImageStore: true }),
      withStore,
      [['kernelBoot.kernelPath', 'FieldValueForbidden']],
    ],
    [
      'a registry disk the agent did not pull',
      spec([{ kind: 'registry', image: 'quay.io/a/b', pullPolicy: 'IfNotPresent' }]),
      withStore,
      [['disks[0].source', 'FieldValueForbidden']],
    ],
    [
      'a kernel-boot image the agent did not pull',
      spec([], { kernelPath: '/boot/vmlinuz', container: { image: 'quay.io/k', pullPolicy: 'Always' } }),
      withStore,
      [['kernelBoot.container', 'FieldValueForbidden']],
    ],
  ];
  for (const [what, s, p, want] of attempts) t.same(await refusals(s, p), want, what);
});

t.test(
  "a VM's filesystem view needs the directories of its PersistentVolume disks, a published device itself, and nothing for its other disks",
  async (t) => {
    const s = spec([
      { kind: 'host', path: '/mnt/pv-a/disk.img', fromPersistentVolume: true, createSizeMiB: 16 },
      { kind: 'host', path: '/dev/sdb', fromPersistentVolume: true },
      { kind: 'host', path: '/srv/disks/data.img' },
      { kind: 'image', path: '/srv/images/disk.qcow2' },
      { kind: 'host', path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-b', fromPersistentVolume: true, ownDeviceNode: true },
    ]);
    s.disks[1]!.readOnly = true;
    t.same(persistentVolumeDirs(s), [
      { path: '/mnt/pv-a', readOnly: false },
      { path: '/dev', readOnly: true },
      { path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-b', readOnly: false, device: true },
    ]);
  },
);
