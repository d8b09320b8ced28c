// The test guest's initramfs: busybox, qemu-ga, dropbear and their libraries, the kernel
// modules and the generated files, as a reproducible gzipped newc cpio.
import { execFile } from 'node:child_process';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { BUSYBOX, QEMU_GA, type Inputs } from './recipe.js';
import { DROPBEAR } from './ssh-server.js';
import { NETCAT } from './udp-echo.js';

const execFileP = promisify(execFile);
const gzipP = promisify(gzip);

interface CpioEntry {
  name: string;
  mode: number; // including file type bits
  data?: Buffer;
  rdev?: [number, number];
}

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;

export async function buildInitramfs(inputs: Inputs, files: Map<string, string>): Promise<Buffer> {
  const entries = new Map<string, CpioEntry>();
  const dir = (name: string, mode = 0o755) => {
    const parts = name.split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const p = parts.slice(0, i).join('/');
      if (!entries.has(p)) entries.set(p, { name: p, mode: S_IFDIR | (i === parts.length ? mode : 0o755) });
    }
  };
  const file = (name: string, data: Buffer, mode: number) => {
    const rel = name.replace(/^\/+/, '');
    dir(path.dirname(rel));
    entries.set(rel, { name: rel, mode: S_IFREG | mode, data });
  };
  const symlink = (name: string, target: string) => {
    const rel = name.replace(/^\/+/, '');
    dir(path.dirname(rel));
    entries.set(rel, { name: rel, mode: S_IFLNK | 0o777, data: Buffer.from(target) });
  };
  const chardev = (name: string, major: number, minor: number, mode: number) => {
    const rel = name.replace(/^\/+/, '');
    dir(path.dirname(rel));
    entries.set(rel, { name: rel, mode: S_IFCHR | mode, rdev: [major, minor] });
  };

  for (const d of ['proc', 'sys', 'dev', 'run', 'root', 'etc', 'var/log', 'lib/modules']) dir(d, d === 'root' ? 0o700 : 0o755);
  dir('tmp', 0o1777);
  // The kernel opens /dev/console for init before /init can mount devtmpfs.
  chardev('dev/console', 5, 1, 0o600);
  chardev('dev/null', 1, 3, 0o666);
  chardev('dev/ttyS0', 4, 64, 0o660);
  symlink('sbin', 'bin');
  symlink('usr/bin', '../bin');
  symlink('usr/sbin', '../bin');
  symlink('var/run', '../run');

  file('bin/busybox', await fs.readFile(BUSYBOX), 0o755);
  for (const applet of inputs.applets) {
    if (applet === 'busybox') continue;
    symlink(`bin/${applet}`, 'busybox');
  }
  file('bin/qemu-ga', await fs.readFile(QEMU_GA), 0o755);
  file('bin/dropbear', await fs.readFile(DROPBEAR), 0o755);
  file('bin/nc.traditional', await fs.readFile(NETCAT), 0o755);
  for (const lib of inputs.libs) file(lib.guestPath, await fs.readFile(lib.hostPath), 0o755);
  for (const m of inputs.modules) file(`lib/modules/${m.name}.ko`, await readModule(m.file), 0o644);

  for (const [name, content] of files) {
    const exec = name === '/init' || name.startsWith('/bin/') || name.startsWith('/etc/acpi/') || name === '/etc/udhcpc.script';
    file(name, Buffer.from(content), exec ? 0o755 : 0o644);
  }

  const sorted = [...entries.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return gzipP(writeCpioNewc(sorted), { level: 6 });
}

async function readModule(file: string): Promise<Buffer> {
  if (file.endsWith('.ko')) return fs.readFile(file);
  const tool = file.endsWith('.xz') ? 'xz' : file.endsWith('.zst') ? 'zstd' : file.endsWith('.gz') ? 'gzip' : undefined;
  if (!tool) throw new Error(`unsupported module file ${file}`);
  const { stdout } = await execFileP(tool, ['-dc', file], { encoding: 'buffer', maxBuffer: 64 << 20 });
  return stdout;
}

/** SVR4 "newc" cpio, owned by root, fixed mtime: same inputs give the same bytes. */
function writeCpioNewc(entries: CpioEntry[]): Buffer {
  const chunks: Buffer[] = [];
  const pad4 = (n: number) => Buffer.alloc((4 - (n % 4)) % 4);
  const hex = (n: number) => n.toString(16).padStart(8, '0');
  let ino = 1;
  const push = (e: CpioEntry) => {
    const data = e.data ?? Buffer.alloc(0);
    const name = Buffer.from(e.name + '\0');
    const header =
      '070701' +
      [
        ino++,
        e.mode,
        0, // uid
        0, // gid
        (e.mode & 0o170000) === S_IFDIR ? 2 : 1,
        0, // mtime
        data.length,
        0,
        0,
        e.rdev?.[0] ?? 0,
        e.rdev?.[1] ?? 0,
        name.length,
        0,
      ]
        .map(hex)
        .join('');
    chunks.push(Buffer.from(header, 'ascii'), name, pad4(110 + name.length), data, pad4(data.length));
  };
  for (const e of entries) push(e);
  push({ name: 'TRAILER!!!', mode: 0 });
  const out = Buffer.concat(chunks);
  return Buffer.concat([out, Buffer.alloc((512 - (out.length % 512)) % 512)]);
}
