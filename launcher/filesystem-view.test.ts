import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { existingEntries, planFilesystemView, realViewInputs } from './filesystem-view.js';
import { NAMESPACE_INIT_SCRIPT } from './libvirtd.js';

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
  // An image directory that holds a secret directory the node denies.
  const shared = join(dir, 'shared');
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
  echo "private: $(ls -A ${shared}/private)"
  touch ${shared}/private/new || true
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
  const run = spawnSync(
    'unshare',
    [
      '--mount',
      '--pid',
      '--fork',
      '--mount-proc',
      '--propagation',
      'private',
      '/bin/sh',
      '-c',
      NAMESPACE_INIT_SCRIPT,
      'vkvm-ns-init',
      ...libvirt,
      join(dir, 'libvirt-cache'),
      fake,
      '0',
      '',
      ...view.map((e) => `${e.op}:${e.path}`),
    ],
    { encoding: 'utf8' },
  );
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
