import { execFileSync, spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { existingEntries, planFilesystemView, realViewInputs } from './filesystem-view.js';
import { NAMESPACE_INIT_SCRIPT } from './namespace-init.js';

const SYSTEM = [
  { op: 'keep-ro', path: '/bin' },
  { op: 'rbind', path: '/dev' },
  { op: 'keep-ro', path: '/lib' },
  { op: 'rbind', path: '/sys' },
  { op: 'tmpfs', path: '/tmp' },
  { op: 'keep-ro', path: '/usr' },
  { op: 'proc', path: '/proc' },
  { op: 'keep-ro', path: '/sbin' },
  { op: 'keep-ro', path: '/lib32' },
  { op: 'keep-ro', path: '/lib64' },
  { op: 'keep-ro', path: '/libx32' },
];
const ETC = ['/etc/group', '/etc/passwd', '/etc/localtime', '/etc/ld.so.cache', '/etc/nsswitch.conf'];
const byPath = (a: { path: string }, b: { path: string }) => a.path.length - b.path.length || a.path.localeCompare(b.path);

/** Runs the namespace's init script as the launcher does, with `fake` in libvirtd's place and QEMU as 64000:64000. */
function runInitScript(libvirt: string[], cache: string, fake: string, view: { op: string; path: string }[]) {
  const ns = ['--mount', '--pid', '--fork', '--mount-proc', '--propagation', 'private'];
  const args = [...libvirt, cache, fake, '0', '', '64000:64000', ...view.map((e) => `${e.op}:${e.path}`)];
  return spawnSync('unshare', [...ns, '/bin/sh', '-c', NAMESPACE_INIT_SCRIPT, 'vkvm-ns-init', ...args], { encoding: 'utf8' });
}

t.test(
  "the plan is an allow-list: system software, devices, a few /etc files, and the VM's directories, parents first; nothing of vkvm's state besides",
  async (t) => {
    const plan = planFilesystemView({
      vmDir: '/var/lib/vkvm/vms/u1',
      imageCacheDir: '/var/cache/vkvm/images',
      hostFiles: {
        imageDirs: ['/srv/images', '/var/cache/vkvm/guest'],
        hostDiskDirs: ['/srv/disks'],
        deniedDirs: ['/var/lib/vkvm', '/run/vkvm', '/var/cache/vkvm/images', '/var/lib/vkvm/images'],
        imageStoreDir: '/var/lib/vkvm/images',
      },
      volumeDirs: [
        { path: '/mnt/pv1', readOnly: false },
        { path: '/mnt/pv2', readOnly: true },
        // A Block volume's device: /dev is there already, and stays bound with all below it.
        { path: '/dev', readOnly: false },
      ],
      programs: ['/usr/sbin/libvirtd', '/opt/qemu/bin/qemu-system-x86_64'],
    });
    t.same(
      plan,
      [
        ...SYSTEM,
        ...ETC.map((p) => ({ op: 'keep-ro', path: p })),
        { op: 'keep-rw', path: '/mnt/pv1' },
        { op: 'keep-ro', path: '/mnt/pv2' },
        { op: 'keep-rw', path: '/srv/disks' },
        { op: 'keep-ro', path: '/srv/images' },
        { op: 'keep-ro', path: '/var/lib/vkvm/images' },
        { op: 'keep-rw', path: '/var/lib/vkvm/vms/u1' },
        { op: 'keep-ro', path: '/var/cache/vkvm/guest' },
        { op: 'keep-ro', path: '/var/cache/vkvm/images' },
        { op: 'keep-ro', path: '/opt/qemu/bin/qemu-system-x86_64' },
      ].sort(byPath),
    );
  },
);

t.test("an operator's directory that is /tmp is the host's /tmp; /dev stays the host's devices with all mounted below", async (t) => {
  const plan = planFilesystemView({
    vmDir: '/var/lib/vkvm/vms/u1',
    imageCacheDir: '/var/cache/vkvm/images',
    hostFiles: { imageDirs: ['/dev'], hostDiskDirs: ['/tmp'], deniedDirs: [] },
  });
  t.same(
    plan.filter((e) => ['/tmp', '/dev'].includes(e.path)),
    [
      { op: 'rbind', path: '/dev' },
      { op: 'keep-rw', path: '/tmp' },
    ],
  );
});

t.test('secrets inside a bound directory are hidden, and what the VM needs below them bound again', async (t) => {
  const plan = planFilesystemView({
    vmDir: '/usr/local/vkvm/vms/u1',
    imageCacheDir: '/usr/local/vkvm/cache',
    hostFiles: {
      imageDirs: ['/usr/local/images'],
      hostDiskDirs: ['/usr/local/disks'],
      deniedDirs: ['/usr/local/vkvm', '/usr/local/vkvm/cache', '/usr/local/vkvm/pki'],
    },
  });
  t.same(
    plan.filter((e) => e.path.startsWith('/usr/')),
    [
      { op: 'hide', path: '/usr/local/vkvm' },
      { op: 'keep-rw', path: '/usr/local/disks' },
      { op: 'keep-ro', path: '/usr/local/vkvm/cache' },
      { op: 'keep-rw', path: '/usr/local/vkvm/vms/u1' },
    ],
    '/usr/local/images is in /usr already; /usr/local/vkvm/pki is covered by its parent',
  );
});

t.test("in the namespace's view, libvirtd (and so QEMU) sees only the allowed entries and its VM's own files", async (t) => {
  const dir = t.testdir();
  const state = join(dir, 'state');
  const vmDir = join(state, 'vms', 'a');
  const libvirt = ['run', 'lib', 'log', 'etc'].map((n) => join(vmDir, 'libvirt', n));
  // An image directory that holds a secret directory the node denies (with a space: fstab escapes it).
  const shared = join(dir, 'shared images');
  for (const d of [
    ...libvirt,
    join(state, 'vms', 'b'),
    join(state, 'pki'),
    join(state, 'images'),
    join(dir, 'cache'),
    join(dir, 'libvirt-cache'),
    join(shared, 'private'),
  ])
    await mkdir(d, { recursive: true });
  await writeFile(join(shared, 'private', 'key'), 'secret');
  await writeFile(join(libvirt[0]!, 'marker'), '');
  await writeFile(join(dir, 'libvirt-cache', 'capabilities'), '');
  await writeFile(join(state, 'vms', 'b', 'cloudinit.iso'), 'password: other-tenant');
  await writeFile(join(state, 'pki', 'ca.key'), 'node key');
  await writeFile(join(state, 'images', 'disk'), 'image bytes');
  // Planted in the host's /tmp, as any process on the node may.
  const hostTmp = await mkdtemp(join(tmpdir(), 'vkvm-view-test-'));
  t.teardown(() => rm(hostTmp, { recursive: true, force: true }));
  await writeFile(join(hostTmp, 'secret'), 'host tmp file');
  // Stands in for libvirtd: reports what it sees into the VM's directory.
  const fake = join(dir, 'fake-libvirtd');
  await writeFile(
    fake,
    `#!/bin/sh
{
  echo "root: $(ls -A / | tr '\\n' ' ')"
  echo "etc: $(ls -A /etc | tr '\\n' ' ')"
  echo "vms: $(ls -A ${state}/vms)"
  cat ${state}/vms/b/cloudinit.iso || true
  cat ${state}/pki/ca.key || true
  cat ${hostTmp}/secret || true
  echo "private: $(ls -A '${shared}/private')"
  touch '${shared}/private/new' || true
  echo "image: $(cat ${state}/images/disk)"
  touch ${state}/images/new || true
  touch /new || true
  touch ${vmDir}/written
  echo "run: $(ls -A /run/libvirt)"
  echo "cache: $(ls -A /var/cache/libvirt)"
  touch /var/cache/libvirt/written
  echo "qemu: $(ls /usr/bin/qemu-system-x86_64)"
} > ${vmDir}/seen 2>&1
`,
  );
  await chmod(fake, 0o755);
  // The view's root is mounted there; nothing else of libvirt's need exist on the host.
  await mkdir('/run/libvirt', { recursive: true });
  const view = await existingEntries(
    planFilesystemView(
      await realViewInputs({
        vmDir,
        imageCacheDir: join(dir, 'cache'),
        hostFiles: {
          imageDirs: [shared],
          hostDiskDirs: [],
          deniedDirs: [state, join(dir, 'cache'), join(shared, 'private')],
          imageStoreDir: join(state, 'images'),
        },
        programs: [fake],
      }),
    ),
  );
  const run = runInitScript(libvirt, join(dir, 'libvirt-cache'), fake, view);
  t.equal(run.status, 0, `the init script ran: ${run.stderr}`);
  const top = dir.split('/')[1]!;
  const rootEntries = [...new Set(['bin', 'dev', 'etc', 'lib', 'lib64', 'proc', 'run', 'sbin', 'sys', 'tmp', 'usr', 'var', top])]
    .filter((e) => ['etc', 'run', 'var', 'proc', 'tmp', top].includes(e) || existsSync(`/${e}`))
    .sort();
  const etcEntries = ['group', 'ld.so.cache', 'libvirt', 'localtime', 'nsswitch.conf', 'passwd'];
  const seen = await readFile(join(vmDir, 'seen'), 'utf8');
  t.match(
    seen,
    new RegExp(
      [
        `^root: ${rootEntries.join(' ')} `,
        `etc: ${etcEntries.join(' ')} `,
        'vms: a',
        `cat: ${state}/vms/b/cloudinit.iso: No such file or directory`,
        `cat: ${state}/pki/ca.key: No such file or directory`,
        `cat: ${hostTmp}/secret: No such file or directory`,
        'private: ',
        `touch: cannot touch '${shared}/private/new': Read-only file system`,
        'image: image bytes',
        `touch: cannot touch '${state}/images/new': Read-only file system`,
        "touch: cannot touch '/new': Read-only file system",
        'run: marker',
        'cache: capabilities',
        'qemu: /usr/bin/qemu-system-x86_64',
      ]
        .map((l) => l.replace(/[.+]/g, '\\$&'))
        .join('\n'),
    ),
    "only the allowed entries are there; another VM's files, the node's keys, the host's /tmp and a denied directory inside an image directory are not; images are read-only",
  );
  t.ok(existsSync(join(vmDir, 'written')), "the VM's own directory is writable, and is the host's");
  t.ok(existsSync(join(dir, 'libvirt-cache', 'written')), "the node's libvirt cache is libvirtd's /var/cache/libvirt, writable");
});

t.test("a published block device is a node of the VM's own in the view, QEMU's uid's alone; the host's loop devices are not", async (t) => {
  t.same(
    planFilesystemView({
      vmDir: '/run/vkvm/vms/u1',
      imageCacheDir: '/var/cache/vkvm/images',
      hostFiles: { imageDirs: [], hostDiskDirs: [], deniedDirs: ['/var/lib/vkvm'] },
      volumeDirs: [
        { path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-a', readOnly: false, device: true },
        { path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-b', readOnly: true, device: true },
      ],
    }).filter((e) => e.path.startsWith('/var/lib/')),
    [
      { op: 'device-rw', path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-a' },
      { op: 'device-ro', path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-b' },
    ],
    'the devices and nothing of their directory',
  );
  t.throws(
    () =>
      planFilesystemView({
        vmDir: '/run/vkvm/vms/u1',
        imageCacheDir: '/var/cache/vkvm/images',
        hostFiles: { imageDirs: [], hostDiskDirs: ['/srv'], deniedDirs: [] },
        volumeDirs: [{ path: '/srv/pv-a', readOnly: false, device: true }],
      }),
    /the published device \/srv\/pv-a is inside \/srv, which the view binds from the host/,
    'a node is never made in a host directory the view binds',
  );
  t.same(
    planFilesystemView({
      vmDir: '/run/vkvm/vms/u1',
      imageCacheDir: '/var/cache/vkvm/images',
      hostFiles: { imageDirs: ['/var/lib'], hostDiskDirs: [], deniedDirs: ['/var/lib/vkvm'] },
      volumeDirs: [{ path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-a', readOnly: false, device: true }],
    }).filter((e) => e.path.startsWith('/var/lib')),
    [
      { op: 'keep-ro', path: '/var/lib' },
      { op: 'hide', path: '/var/lib/vkvm' },
      { op: 'device-rw', path: '/var/lib/vkvm/pods/u1/volumeDevices/kubernetes.io~csi/pv-a' },
    ],
    'inside a bound directory, a node goes on the tmpfs that hides vkvm state there',
  );

  // As the CSI driver publishes: a loop device bind-mounted on a file in the pod's volumeDevices directory.
  // Not t.testdir(): its removal would come before the unmount below.
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-view-device-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const vmDir = join(dir, 'vm');
  const libvirt = ['run', 'lib', 'log', 'etc'].map((n) => join(vmDir, 'libvirt', n));
  for (const d of [...libvirt, join(dir, 'libvirt-cache'), join(dir, 'pods')]) await mkdir(d, { recursive: true });
  const loops: string[] = [];
  t.teardown(() => {
    for (const l of loops) spawnSync('losetup', ['-d', l]);
  });
  for (const name of ['published', 'other']) {
    await writeFile(join(dir, `${name}.img`), '');
    await truncate(join(dir, `${name}.img`), 1 << 20);
    loops.push(execFileSync('losetup', ['-f', '--show', join(dir, `${name}.img`)], { encoding: 'utf8' }).trim());
  }
  const published = join(dir, 'pods', 'volumeDevices', 'pv-a');
  await mkdir(join(dir, 'pods', 'volumeDevices'));
  await writeFile(published, '');
  execFileSync('mount', ['--bind', loops[0]!, published]);
  t.teardown(() => spawnSync('umount', [published]));
  const hostNode = await stat(loops[0]!);
  const fake = join(dir, 'fake-libvirtd');
  await writeFile(
    fake,
    `#!/bin/sh
{
  stat -c '%F %u:%g %a %t:%T' ${published}
  echo "pods: $(ls -A ${dir}/pods/volumeDevices)"
  printf vkvm-marker | setpriv --reuid=64000 --regid=64000 --clear-groups dd of=${published} conv=notrunc status=none && echo wrote
  setpriv --reuid=64000 --regid=64000 --clear-groups dd if=${loops[1]} count=1 status=none >/dev/null || echo other refused
} > ${vmDir}/seen 2>&1
`,
  );
  await chmod(fake, 0o755);
  await mkdir('/run/libvirt', { recursive: true });
  const view = await existingEntries(
    planFilesystemView(
      await realViewInputs({
        vmDir,
        imageCacheDir: join(dir, 'libvirt-cache'),
        hostFiles: { imageDirs: [], hostDiskDirs: [], deniedDirs: [join(dir, 'pods')] },
        volumeDirs: [{ path: published, readOnly: false, device: true }],
        programs: [fake],
      }),
    ),
  );
  const run = runInitScript(libvirt, join(dir, 'libvirt-cache'), fake, view);
  t.equal(run.status, 0, `the init script ran: ${run.stderr}`);
  const major = (Number(hostNode.rdev) >> 8) & 0xfff;
  const minor = (Number(hostNode.rdev) & 0xff) | ((Number(hostNode.rdev) >> 12) & 0xfff00);
  t.equal(
    await readFile(join(vmDir, 'seen'), 'utf8'),
    `block special file 64000:64000 600 ${major.toString(16)}:${minor.toString(16)}\npods: pv-a\nwrote\n` +
      `dd: failed to open '${loops[1]}': Permission denied\nother refused\n`,
    "the device is QEMU's uid's to write, nothing else of its directory is there, and another loop device is refused",
  );
  t.equal((await readFile(join(dir, 'published.img'))).subarray(0, 11).toString(), 'vkvm-marker', 'the write reached the volume');
  t.same(
    [(await stat(loops[0]!)).uid, (await stat(loops[0]!)).mode],
    [hostNode.uid, hostNode.mode],
    "the host's node keeps its owner and mode",
  );
});
