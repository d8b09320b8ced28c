// The test guest's bootable disk, read back with tools other than the ones
// that wrote it where there are any (qemu-img for the container, this test's
// own MBR reading, mtools to read the FAT): what a firmware and a boot loader
// will find on it. The disk boots in test/e2e/boot-disk.test.ts.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { bootLoaderConfigs, ensureTestGuestDisk } from './boot-disk.js';
import { ensureTestGuest } from './build.js';
import { GUEST_CMDLINE } from './recipe.js';

t.test('an MBR disk whose one active FAT partition holds syslinux, systemd-boot, the kernel and the initramfs', async (t) => {
  t.setTimeout(120_000);
  const cacheDir = t.testdir();
  const disks = await Promise.all([1, 2].map(() => ensureTestGuestDisk({ cacheDir })));
  t.same(disks[1], disks[0], 'concurrent builders share one entry');
  const disk = disks[0]!;
  t.same(
    (await fs.readdir(cacheDir)).filter((e) => e.startsWith('.tmp-')),
    [],
    'no build directory left',
  );

  const info = JSON.parse(execFileSync('qemu-img', ['info', '--output=json', disk.path], { encoding: 'utf8' })) as Record<string, unknown>;
  t.match(info, { format: 'qcow2' }, 'qcow2, as containerDisks ship');
  t.notOk('backing-filename' in info, 'without a backing file, as KubeVirt requires');

  const scratch = mkdtempSync(join(tmpdir(), 'vkvm-disk-test-'));
  t.teardown(() => rmSync(scratch, { recursive: true, force: true }));
  const raw = join(scratch, 'disk.raw');
  execFileSync('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', disk.path, raw]);
  const bytes = readFileSync(raw);
  const entry = bytes.subarray(446, 462);
  const start = entry.readUInt32LE(8);
  const sectors = entry.readUInt32LE(12);
  t.same(
    {
      bootCode: bytes.subarray(0, 440).equals(readFileSync('/usr/lib/syslinux/mbr/mbr.bin').subarray(0, 440)),
      status: entry[0],
      type: entry[4],
      start,
      fits: (start + sectors) * 512 <= bytes.length,
      mark: bytes.readUInt16BE(510),
      otherEntries: bytes.subarray(462, 510).every((b) => b === 0),
    },
    { bootCode: true, status: 0x80, type: 0xef, start: 2048, fits: true, mark: 0x55aa, otherEntries: true },
    "syslinux's MBR boot code, and one active EFI System Partition at 1 MiB",
  );

  const part = join(scratch, 'part.fat');
  writeFileSync(part, bytes.subarray(start * 512, (start + sectors) * 512));
  const read = (p: string) => execFileSync('mtype', ['-i', part, `::${p}`], { encoding: 'latin1', maxBuffer: 64 << 20 });
  const guest = await ensureTestGuest({ cacheDir, pvh: false });
  t.same(
    {
      vmlinuz: read('/vmlinuz') === readFileSync(guest.kernelPath, 'latin1'),
      initrd: read('/initrd.img') === readFileSync(guest.initrdPath, 'latin1'),
      efiLoader: read('/EFI/BOOT/BOOTX64.EFI') === readFileSync('/usr/lib/systemd/boot/efi/systemd-bootx64.efi', 'latin1'),
      ldlinux: read('/syslinux/ldlinux.c32').startsWith('\x7fELF'),
      vbr: bytes.subarray(start * 512 + 3, start * 512 + 11).toString('latin1'),
      configs: [...bootLoaderConfigs(GUEST_CMDLINE).keys()].map((p) => read(p)),
    },
    {
      vmlinuz: true,
      initrd: true,
      efiLoader: true,
      ldlinux: true,
      vbr: 'SYSLINUX',
      configs: [...bootLoaderConfigs(GUEST_CMDLINE).values()],
    },
    "the bzImage and the guest's initramfs, systemd-boot at the removable-media path, syslinux in the partition's boot sector",
  );
  t.match(read('/syslinux/syslinux.cfg'), `APPEND ${GUEST_CMDLINE}\n`, "syslinux passes the guest's command line");
  t.match(read('/loader/entries/vkvm.conf'), `options ${GUEST_CMDLINE}\n`, "systemd-boot passes the guest's command line");

  t.same(await ensureTestGuestDisk({ cacheDir }), disk, 'a second call is a cache hit');
});
