// A master boot record with one partition, written byte by byte so building
// a disk needs neither fdisk nor loop devices. Addresses are LBA only: the
// CHS fields hold the "beyond CHS" marker (1023/254/63) that fdisk writes for
// such partitions, which every BIOS boot code of this century ignores.

export const SECTOR_BYTES = 512;
/** Partition type of an EFI System Partition on an MBR disk; BIOS boot code does not look at it. */
export const MBR_TYPE_EFI_SYSTEM = 0xef;

export interface MbrPartition {
  /** First sector (LBA). */
  startSector: number;
  sectors: number;
  type: number;
  /** The partition the BIOS boot code loads (syslinux's mbr.bin boots the active one). */
  active: boolean;
}

const CHS_BEYOND = Buffer.from([0xfe, 0xff, 0xff]);

/** Sector 0 of a disk: `bootCode` (at most 440 bytes), a disk signature, one partition entry and the 0x55AA mark. */
export function masterBootRecord(bootCode: Buffer, diskSignature: number, p: MbrPartition): Buffer {
  if (bootCode.length > 440) throw new Error(`MBR boot code is ${bootCode.length} bytes; at most 440 fit`);
  if (!Number.isInteger(p.startSector) || p.startSector < 1)
    throw new Error(`partition start ${p.startSector} must be a sector after the MBR`);
  if (!Number.isInteger(p.sectors) || p.sectors < 1 || p.startSector + p.sectors > 0xffffffff) {
    throw new Error(`partition of ${p.sectors} sectors at ${p.startSector} does not fit an MBR's 32-bit sector addresses`);
  }
  const mbr = Buffer.alloc(SECTOR_BYTES);
  bootCode.copy(mbr, 0);
  mbr.writeUInt32LE(diskSignature >>> 0, 440);
  const entry = 446;
  mbr[entry] = p.active ? 0x80 : 0x00;
  CHS_BEYOND.copy(mbr, entry + 1);
  mbr[entry + 4] = p.type;
  CHS_BEYOND.copy(mbr, entry + 5);
  mbr.writeUInt32LE(p.startSector, entry + 8);
  mbr.writeUInt32LE(p.sectors, entry + 12);
  mbr[510] = 0x55;
  mbr[511] = 0xaa;
  return mbr;
}
