// The guest kernel: the ELF vmlinux unpacked from the Debian bzImage when it
// has a PVH entry, which QEMU boots without in-guest decompression.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs/promises';
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';

/**
 * The bzImage's payload (located by the x86 boot protocol header, >= 2.08) is
 * the compressed ELF vmlinux. Returns it decompressed if it has a PVH entry
 * note (XEN_ELFNOTE_PHYS32_ENTRY), which QEMU's -kernel boots directly.
 */
export async function extractPvhVmlinux(bzImage: string, log: (msg: string) => void): Promise<Buffer | undefined> {
  const img = await fs.readFile(bzImage);
  if (img.length < 0x250 || img.toString('latin1', 0x202, 0x206) !== 'HdrS' || img.readUInt16LE(0x206) < 0x208) {
    log(`${bzImage}: not a bzImage with boot protocol >= 2.08; booting it as is`);
    return undefined;
  }
  const setupSects = img[0x1f1] || 4;
  const start = (setupSects + 1) * 512 + img.readUInt32LE(0x248);
  const payload = img.subarray(start, start + img.readUInt32LE(0x24c));
  let elf: Buffer;
  try {
    if (payload.subarray(0, 6).equals(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]))) {
      // The kernel build appends the decompressed size after the xz stream.
      elf = await pipeThrough('xz', ['-dc', '--single-stream'], payload);
    } else if (payload[0] === 0x1f && payload[1] === 0x8b) {
      elf = await promisify(gunzip)(payload);
    } else {
      log(`${bzImage}: payload compression ${payload.subarray(0, 4).toString('hex')} not supported; booting the bzImage`);
      return undefined;
    }
  } catch (err) {
    log(`${bzImage}: could not unpack payload (${(err as Error).message}); booting the bzImage`);
    return undefined;
  }
  if (!hasPvhNote(elf)) {
    log(`${bzImage}: vmlinux has no PVH entry note; booting the bzImage`);
    return undefined;
  }
  return elf;
}

function hasPvhNote(elf: Buffer): boolean {
  const XEN_ELFNOTE_PHYS32_ENTRY = 18;
  const PT_NOTE = 4;
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) return false; // ELF64 LE
  const phoff = Number(elf.readBigUInt64LE(0x20));
  const phentsize = elf.readUInt16LE(0x36);
  const phnum = elf.readUInt16LE(0x38);
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize;
    if (ph + 56 > elf.length || elf.readUInt32LE(ph) !== PT_NOTE) continue;
    let off = Number(elf.readBigUInt64LE(ph + 8));
    const end = Math.min(elf.length, off + Number(elf.readBigUInt64LE(ph + 32)));
    while (off + 12 <= end) {
      const namesz = elf.readUInt32LE(off);
      const descsz = elf.readUInt32LE(off + 4);
      const type = elf.readUInt32LE(off + 8);
      const name = elf.toString('latin1', off + 12, off + 12 + Math.max(0, namesz - 1));
      if (name === 'Xen' && type === XEN_ELFNOTE_PHYS32_ENTRY) return true;
      off += 12 + align4(namesz) + align4(descsz);
    }
  }
  return false;
}

const align4 = (n: number) => (n + 3) & ~3;

function pipeThrough(cmd: string, args: string[], input: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`${cmd} exited ${code}: ${err.trim()}`))));
    child.stdin.on('error', () => {}); // reported through the exit code
    child.stdin.end(input);
  });
}
