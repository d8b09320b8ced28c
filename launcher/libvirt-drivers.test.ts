import { readdir, readlink } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { findDriverDir, QEMU_DRIVER_MODULE, qemuOnlyDriverDir } from './libvirt-drivers.js';

const driverDir = () => ({ libvirt: { 'connection-driver': { [QEMU_DRIVER_MODULE]: '', 'libvirt_driver_network.so': '' } } });

t.test('the installed qemu driver is found in a multiarch, lib64 or plain lib directory; none without it', async (t) => {
  const root = t.testdir({
    debian: { usr: { lib: { 'x86_64-linux-gnu': driverDir() } } },
    fedora: { usr: { lib64: driverDir(), lib: {} } },
    arch: { usr: { lib: driverDir() } },
    none: { usr: { lib: { 'x86_64-linux-gnu': { libvirt: { 'connection-driver': { 'libvirt_driver_network.so': '' } } } } } },
  });
  const find = (os: string) => findDriverDir([path.join(root, os, 'usr/lib64'), path.join(root, os, 'usr/lib')]);
  t.same(
    { debian: await find('debian'), fedora: await find('fedora'), arch: await find('arch'), none: await find('none') },
    {
      debian: path.join(root, 'debian/usr/lib/x86_64-linux-gnu/libvirt/connection-driver'),
      fedora: path.join(root, 'fedora/usr/lib64/libvirt/connection-driver'),
      arch: path.join(root, 'arch/usr/lib/libvirt/connection-driver'),
      none: undefined,
    },
  );
});

t.test('the private driver directory offers the qemu driver alone, linked to the installed one; again is the same', async (t) => {
  const root = t.testdir({ installed: driverDir().libvirt['connection-driver'] });
  const dir = path.join(root, 'private');
  for (let i = 0; i < 2; i++) await qemuOnlyDriverDir(dir, path.join(root, 'installed'));
  t.same(
    { files: await readdir(dir), target: await readlink(path.join(dir, QEMU_DRIVER_MODULE)) },
    { files: [QEMU_DRIVER_MODULE], target: path.join(root, 'installed', QEMU_DRIVER_MODULE) },
  );
});
