import t from 'tap';
import { masterBootRecord, MBR_TYPE_EFI_SYSTEM } from './mbr.js';

const partition = { startSector: 2048, sectors: 45056, type: MBR_TYPE_EFI_SYSTEM, active: true };

t.test('one active partition after the boot code, LBA addressed, with the boot signature', async (t) => {
  const mbr = masterBootRecord(Buffer.alloc(440, 0xcc), 0x766b766d, partition);
  t.same(
    {
      length: mbr.length,
      bootCode: mbr.subarray(0, 440).every((b) => b === 0xcc),
      signature: mbr.readUInt32LE(440).toString(16),
      entry: [...mbr.subarray(446, 462)],
      otherEntries: mbr.subarray(462, 510).every((b) => b === 0),
      mark: mbr.readUInt16BE(510).toString(16),
    },
    {
      length: 512,
      bootCode: true,
      signature: '766b766d',
      // active, CHS beyond 1023/254/63, type EF, CHS again, LBA 2048, 45056 sectors (little-endian)
      entry: [0x80, 0xfe, 0xff, 0xff, 0xef, 0xfe, 0xff, 0xff, 0x00, 0x08, 0, 0, 0x00, 0xb0, 0, 0],
      otherEntries: true,
      mark: '55aa',
    },
  );
  t.equal(masterBootRecord(Buffer.alloc(0), 0, { ...partition, active: false })[446], 0, 'an inactive partition has status 0');
});

t.test('what cannot be an MBR is refused, saying why', async (t) => {
  t.throws(() => masterBootRecord(Buffer.alloc(446), 0, partition), { message: 'MBR boot code is 446 bytes; at most 440 fit' });
  t.throws(() => masterBootRecord(Buffer.alloc(440), 0, { ...partition, startSector: 0 }), {
    message: 'partition start 0 must be a sector after the MBR',
  });
  t.throws(() => masterBootRecord(Buffer.alloc(440), 0, { ...partition, sectors: 2 ** 32 }), {
    message: `partition of ${2 ** 32} sectors at 2048 does not fit an MBR's 32-bit sector addresses`,
  });
});
