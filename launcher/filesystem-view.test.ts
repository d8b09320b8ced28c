import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { existingEntries, planFilesystemView } from './filesystem-view.js';
import { NAMESPACE_INIT_SCRIPT } from './libvirtd.js';

t.test('the plan hides vkvm state and user secrets, keeps the VM dir and images, parents first', async (t) => {
  const plan = planFilesystemView({
    vmDir: '/var/lib/vkvm/vms/u1',
    imageCacheDir: '/var/cache/vkvm/images',
    hostFiles: {
      imageDirs: ['/srv/images'],
      hostDiskDirs: ['/srv/disks'],
      deniedDirs: ['/var/lib/vkvm', '/run/vkvm', '/var/cache/vkvm/images', '/var/lib/vkvm/images'],
      imageStoreDir: '/var/lib/vkvm/images',
    },
  });
  t.same(plan, [
    { op: 'hide', path: '/home' },
    { op: 'hide', path: '/root' },
    { op: 'hide', path: '/run/vkvm' },
    { op: 'keep-ro', path: '/srv/images' },
    { op: 'hide', path: '/var/lib/vkvm' },
    { op: 'hide', path: '/etc/kubernetes' },
    { op: 'keep-ro', path: '/var/lib/vkvm/images' },
    { op: 'keep-rw', path: '/var/lib/vkvm/vms/u1' },
    { op: 'keep-ro', path: '/var/cache/vkvm/images' },
  ]);
});

t.test(
  "in the namespace's view, libvirtd (and so QEMU) sees its VM's directory and the images, read-only, and nothing else of vkvm's state",
  async (t) => {
    const dir = t.testdir();
    const state = join(dir, 'state');
    const vmDir = join(state, 'vms', 'a');
    const libvirt = ['run', 'lib', 'log', 'etc'].map((n) => join(vmDir, 'libvirt', n));
    for (const d of [...libvirt, join(state, 'vms', 'b'), join(state, 'pki'), join(state, 'images'), join(dir, 'cache')])
      await mkdir(d, { recursive: true });
    await writeFile(join(libvirt[0]!, 'marker'), '');
    await writeFile(join(state, 'vms', 'b', 'cloudinit.iso'), 'password: other-tenant');
    await writeFile(join(state, 'pki', 'ca.key'), 'node key');
    await writeFile(join(state, 'images', 'disk'), 'image bytes');
    // Stands in for libvirtd: reports what it sees into the VM's directory.
    const fake = join(dir, 'fake-libvirtd');
    await writeFile(
      fake,
      `#!/bin/sh
{
  echo "vms: $(ls -A ${state}/vms)"
  cat ${state}/vms/b/cloudinit.iso || true
  cat ${state}/pki/ca.key || true
  echo "image: $(cat ${state}/images/disk)"
  touch ${state}/images/new || true
  touch ${vmDir}/written
  echo "run: $(ls -A /run/libvirt)"
} > ${vmDir}/seen 2>&1
`,
    );
    await chmod(fake, 0o755);
    for (const target of ['/run/libvirt', '/var/lib/libvirt', '/var/log/libvirt', '/etc/libvirt']) await mkdir(target, { recursive: true });
    const view = await existingEntries(
      planFilesystemView({
        vmDir,
        imageCacheDir: join(dir, 'cache'),
        hostFiles: { imageDirs: [], hostDiskDirs: [], deniedDirs: [state, join(dir, 'cache')], imageStoreDir: join(state, 'images') },
      }),
    );
    const run = spawnSync(
      'unshare',
      [
        '--mount',
        '--propagation',
        'private',
        '/bin/sh',
        '-c',
        NAMESPACE_INIT_SCRIPT,
        'vkvm-ns-init',
        ...libvirt,
        fake,
        '0',
        ...view.map((e) => `${e.op}:${e.path}`),
      ],
      { encoding: 'utf8' },
    );
    t.equal(run.status, 0, `the init script ran: ${run.stderr}`);
    const seen = await readFile(join(vmDir, 'seen'), 'utf8');
    t.match(
      seen,
      new RegExp(
        [
          '^vms: a',
          `cat: ${state}/vms/b/cloudinit.iso: No such file or directory`,
          `cat: ${state}/pki/ca.key: No such file or directory`,
          'image: image bytes',
          `touch: cannot touch '${state}/images/new': Read-only file system`,
          'run: marker',
        ].join('\n'),
      ),
      "another VM's files and the node's keys are not there; images are read-only; the private run dir is libvirt's",
    );
    t.ok(existsSync(join(vmDir, 'written')), "the VM's own directory is writable, and is the host's");
  },
);
