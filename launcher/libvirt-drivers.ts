// The monolithic libvirtd loads every connection driver it finds (network,
// storage, nodedev, nwfilter, secret, interface, qemu) and starts each; the
// launcher's daemon serves one QEMU domain and needs only the qemu driver.
// libvirt looks for its driver modules in $LIBVIRT_DRIVER_DIR when set, so a
// private directory holding a link to the qemu driver alone makes the daemon
// start only that one (measured here: about half the daemon's start-up CPU).
import { access, mkdir, readdir, rm, symlink } from 'node:fs/promises';
import path from 'node:path';

export const QEMU_DRIVER_MODULE = 'libvirt_driver_qemu.so';

/** Where distributions install libvirt's connection drivers, below a library directory. */
const DRIVER_SUBDIR = path.join('libvirt', 'connection-driver');

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

/**
 * The directory holding the installed qemu driver module: searched in the
 * library directories of Debian (multiarch), Fedora and Arch layouts.
 * Undefined when none has it (a libvirt built without driver modules).
 */
export async function findDriverDir(libRoots: readonly string[] = ['/usr/lib64', '/usr/lib']): Promise<string | undefined> {
  for (const root of libRoots) {
    const multiarch = (await readdir(root).catch(() => [] as string[]))
      .filter((n) => n.endsWith('-linux-gnu'))
      .map((n) => path.join(root, n));
    for (const lib of [...multiarch, root]) {
      const dir = path.join(lib, DRIVER_SUBDIR);
      if (await exists(path.join(dir, QEMU_DRIVER_MODULE))) return dir;
    }
  }
  return undefined;
}

/**
 * Makes `dir` a driver directory offering the qemu driver alone, linked to
 * the installed one in `installedDir`. Idempotent.
 */
export async function qemuOnlyDriverDir(dir: string, installedDir: string): Promise<string> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  const link = path.join(dir, QEMU_DRIVER_MODULE);
  await rm(link, { force: true });
  await symlink(path.join(installedDir, QEMU_DRIVER_MODULE), link);
  return dir;
}
