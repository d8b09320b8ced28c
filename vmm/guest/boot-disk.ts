// The test guest as a bootable disk, the way cloud images boot: firmware →
// boot loader on the disk → the Debian kernel and the test initramfs. Made
// from Debian packages without loop devices or mounts: one FAT partition,
// active in an MBR whose boot code is syslinux's mbr.bin, holding
//   - syslinux (BIOS: SeaBIOS → mbr.bin → the partition's syslinux → kernel), and
//   - systemd-boot as \EFI\BOOT\BOOTX64.EFI, the removable-media path that
//     UEFI firmware (OVMF) boots without any boot entry of its own,
// both loading the same /vmlinuz (the bzImage: neither loader boots an ELF
// vmlinux) and /initrd.img with the guest's command line. The partition type
// is the EFI System Partition's; BIOS boot code does not look at it.
//
// The disk is a qcow2 file cached like the guest it holds (cache-entry.ts),
// under a key hashing that guest's key and the boot loaders' packages.
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { run } from '../exec.js';
import { ensureTestGuest, logger, type EnsureTestGuestOptions, type TestGuest } from './build.js';
import { newBuildDir, publishEntry, writeDurable } from './cache-entry.js';
import { masterBootRecord, MBR_TYPE_EFI_SYSTEM, SECTOR_BYTES } from './mbr.js';
import { DEFAULT_GUEST_CACHE_DIR, GUEST_BOOT_MARKER, GUEST_CMDLINE } from './recipe.js';

/** Bump when the disk's layout changes in a way the inputs would miss. */
const DISK_RECIPE_VERSION = 1;

const MIB = 1 << 20;
/** The partition starts at 1 MiB, as partitioning tools align it. */
const PARTITION_OFFSET_BYTES = MIB;
/** Free room in the partition besides the kernel and initramfs. */
const SLACK_MIB = 8;
/** FAT16 needs at least 4085 clusters; mkfs.vfat's smallest clusters make that 16 MiB at most. */
const MIN_PARTITION_MIB = 16;

/** Host files the disk is made of, with the package that ships each. */
const BOOT_FILES = {
  mbr: { path: '/usr/lib/syslinux/mbr/mbr.bin', pkg: 'syslinux-common' },
  efiLoader: { path: '/usr/lib/systemd/boot/efi/systemd-bootx64.efi', pkg: 'systemd-boot-efi' },
} as const;
/** Programs the build runs, with their package. */
const TOOLS = [
  { bin: 'mkfs.vfat', pkg: 'dosfstools' },
  { bin: 'mmd', pkg: 'mtools' },
  { bin: 'mcopy', pkg: 'mtools' },
  { bin: 'syslinux', pkg: 'syslinux' },
  { bin: 'qemu-img', pkg: 'qemu-utils' },
] as const;

export interface TestGuestDisk {
  /** The bootable qcow2 image (no backing file), as a containerDisk ships it at /disk/disk.img. */
  path: string;
  /** The kernel command line both boot loaders pass. */
  cmdline: string;
  bootMarker: string;
}

/** The bootable disk of the test guest, built on first use (a few seconds) and cached. */
export async function ensureTestGuestDisk(opts: EnsureTestGuestOptions = {}): Promise<TestGuestDisk> {
  const log = logger(opts.log);
  // The bzImage, not the PVH vmlinux: boot loaders start kernels through the x86 boot protocol.
  const guest = await ensureTestGuest({ ...opts, pvh: false });
  const cacheDir = path.resolve(opts.cacheDir ?? DEFAULT_GUEST_CACHE_DIR);
  const packages = await packageVersions();
  const key = diskKey(guest, packages);
  const finalDir = path.join(cacheDir, `disk-${key}`);
  const result: TestGuestDisk = { path: path.join(finalDir, 'disk.qcow2'), cmdline: GUEST_CMDLINE, bootMarker: GUEST_BOOT_MARKER };
  if (await isComplete(finalDir)) {
    log(`test guest disk cache hit: ${finalDir}`);
    return result;
  }
  const tmp = await newBuildDir(cacheDir, `disk-${key}`);
  try {
    const started = Date.now();
    log(`building test guest disk ${key} in ${tmp}`);
    const partitionBytes = await buildBootPartition(guest, path.join(tmp, 'boot.fat'));
    await assembleDisk(path.join(tmp, 'boot.fat'), partitionBytes, path.join(tmp, 'disk.raw'), key);
    await run('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', path.join(tmp, 'disk.raw'), path.join(tmp, 'disk.qcow2')]);
    await Promise.all(['boot.fat', 'disk.raw'].map((f) => fs.rm(path.join(tmp, f))));
    await fs.chmod(path.join(tmp, 'disk.qcow2'), 0o644);
    const manifest = {
      key,
      recipe: DISK_RECIPE_VERSION,
      guest: path.basename(path.dirname(guest.initrdPath)),
      packages,
      cmdline: GUEST_CMDLINE,
      partitionBytes,
      builtAt: new Date().toISOString(),
    };
    // Written last: a directory with a manifest is complete.
    await writeDurable(path.join(tmp, 'manifest.json'), Buffer.from(JSON.stringify(manifest, null, 2) + '\n'));
    await publishEntry(tmp, finalDir, isComplete);
    log(`test guest disk ready in ${Date.now() - started} ms: ${result.path}`);
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
  return result;
}

async function isComplete(dir: string): Promise<boolean> {
  return fs.access(path.join(dir, 'manifest.json')).then(
    () => true,
    () => false,
  );
}

function diskKey(guest: TestGuest, packages: Record<string, string>): string {
  // The guest's cache directory is named by its key, which already hashes this folder's sources.
  const guestKey = path.basename(path.dirname(guest.initrdPath));
  return createHash('sha256')
    .update(JSON.stringify({ recipe: DISK_RECIPE_VERSION, guestKey, packages }))
    .digest('hex')
    .slice(0, 32);
}

/** The boot loaders' configuration files, keyed by path in the partition. */
export function bootLoaderConfigs(cmdline: string): Map<string, string> {
  return new Map([
    // SERIAL makes syslinux print (its banner included) on the first serial port, where the VM's console is.
    [
      '/syslinux/syslinux.cfg',
      `SERIAL 0 115200\nDEFAULT vkvm\nPROMPT 0\nTIMEOUT 0\nLABEL vkvm\n  LINUX /vmlinuz\n  INITRD /initrd.img\n  APPEND ${cmdline}\n`,
    ],
    ['/loader/loader.conf', 'timeout 0\ndefault vkvm.conf\neditor no\n'],
    ['/loader/entries/vkvm.conf', `title vkvm test guest\nlinux /vmlinuz\ninitrd /initrd.img\noptions ${cmdline}\n`],
  ]);
}

/** Writes the FAT boot partition to `file`; returns its size. */
async function buildBootPartition(guest: TestGuest, file: string): Promise<number> {
  const sizes = await Promise.all(
    [guest.kernelPath, guest.initrdPath, BOOT_FILES.efiLoader.path].map((p) => fs.stat(p).then((s) => s.size)),
  );
  const mib = Math.max(MIN_PARTITION_MIB, Math.ceil(sizes.reduce((a, b) => a + b, 0) / MIB) + SLACK_MIB);
  // mkfs.vfat -C creates the file; sizes are in KiB.
  await run('mkfs.vfat', ['-C', '-F', '16', '-n', 'VKVM-GUEST', file, String(mib * 1024)]);
  const at = ['-i', file];
  await run('mmd', [...at, '::/syslinux', '::/EFI', '::/EFI/BOOT', '::/loader', '::/loader/entries']);
  // Writes the partition's boot sector and ldlinux.sys/ldlinux.c32 into /syslinux, through mtools.
  await run('syslinux', ['--install', '--directory', '/syslinux', file]);
  await run('mcopy', [...at, guest.kernelPath, '::/vmlinuz']);
  await run('mcopy', [...at, guest.initrdPath, '::/initrd.img']);
  await run('mcopy', [...at, BOOT_FILES.efiLoader.path, '::/EFI/BOOT/BOOTX64.EFI']);
  const staging = await fs.mkdtemp(path.join(path.dirname(file), 'cfg-'));
  try {
    for (const [name, content] of bootLoaderConfigs(GUEST_CMDLINE)) {
      const local = path.join(staging, path.basename(name));
      await fs.writeFile(local, content);
      await run('mcopy', [...at, local, `::${name}`]);
    }
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
  return mib * MIB;
}

/** The raw disk: the MBR, then the partition at PARTITION_OFFSET_BYTES. */
async function assembleDisk(partition: string, partitionBytes: number, out: string, key: string): Promise<void> {
  const bootCode = (await fs.readFile(BOOT_FILES.mbr.path)).subarray(0, 440);
  const mbr = masterBootRecord(bootCode, parseInt(key.slice(0, 8), 16), {
    startSector: PARTITION_OFFSET_BYTES / SECTOR_BYTES,
    sectors: partitionBytes / SECTOR_BYTES,
    type: MBR_TYPE_EFI_SYSTEM,
    active: true,
  });
  const fh = await fs.open(out, 'w', 0o644);
  try {
    await fh.write(mbr, 0, mbr.length, 0);
    await fh.truncate(PARTITION_OFFSET_BYTES);
  } finally {
    await fh.close();
  }
  await pipeline(createReadStream(partition), createWriteStream(out, { flags: 'r+', start: PARTITION_OFFSET_BYTES }));
}

/** The versions of every package the disk is made with; a tool or file missing names its package. */
async function packageVersions(): Promise<Record<string, string>> {
  for (const f of Object.values(BOOT_FILES)) {
    await fs.access(f.path).catch(() => {
      throw new Error(`${f.path} not found (install ${f.pkg}; deploy/setup.sh does)`);
    });
  }
  const dirs = (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':');
  for (const t of TOOLS) {
    const found = await Promise.any(dirs.map((d) => fs.access(path.join(d, t.bin), fs.constants.X_OK))).then(
      () => true,
      () => false,
    );
    if (!found) throw new Error(`${t.bin} not found (install ${t.pkg}; deploy/setup.sh does)`);
  }
  const names = [...new Set([...Object.values(BOOT_FILES).map((f) => f.pkg), ...TOOLS.map((t) => t.pkg)])].sort();
  const out: Record<string, string> = {};
  for (const name of names) out[name] = (await run('dpkg-query', ['-W', '-f=${Version}', name]).catch(() => 'unknown')).trim();
  return out;
}
