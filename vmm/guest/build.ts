// Builds the vkvm test guest from Debian packages already installed on the
// host: the Debian kernel, a busybox-static initramfs, the kernel modules the
// guest needs, and Debian's qemu-ga with the shared libraries it links.
// Nothing is downloaded.
//
// The kernel handed out is, by default, the ELF vmlinux unpacked from the
// Debian bzImage, booted by QEMU through its PVH entry (no firmware-side
// decompression, which costs ~4-5 s under TCG). Guest layout: /init (mounts,
// insmod, boot marker) execs busybox init, whose inittab respawns a root shell
// on ttyS0, qemu-ga on the org.qemu.guest_agent.0 port, and acpid (power
// button → /etc/acpi/PWRF/00000080 → poweroff).
//
// The result is cached under <cacheDir>/<key>/, where the key hashes every
// input (kernel version, package versions, sizes/mtimes of the copied files,
// the builder source). A build happens in a temporary sibling directory that
// is renamed into place, so concurrent callers never see a half-written guest.

import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, realpathSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';

const execFileP = promisify(execFile);
const gzipP = promisify(gzip);

/** Bump when the guest layout changes in a way the source hash would miss. */
const RECIPE_VERSION = 1;

export const DEFAULT_GUEST_CACHE_DIR = '/var/cache/vkvm/guest';
export const GUEST_BOOT_MARKER = 'VKVM-GUEST-BOOTED';
export const GUEST_CMDLINE = 'console=ttyS0 panic=-1 quiet';
export const GUEST_AGENT_PORT = 'org.qemu.guest_agent.0';
/** PS1 of the serial root shell; `\w` is the working directory. */
export const GUEST_PROMPT = 'vkvm-guest:\\w# ';

/** Modules the guest loads, dependencies resolved from modules.dep (deps first). */
const REQUIRED_MODULES = [
  'virtio_pci', // virtio_ring → virtio → virtio_pci_modern_dev → virtio_pci_legacy_dev → virtio_pci
  'virtio_console', // virtio-serial: the guest agent channel
  'button', // ACPI power button → input event
  'evdev', // /dev/input/event* for busybox acpid
];
const OPTIONAL_MODULES = ['virtio_blk', 'virtio_net'];

const BUSYBOX = '/bin/busybox';
const QEMU_GA = '/usr/sbin/qemu-ga';

export interface TestGuest {
  kernelPath: string;
  initrdPath: string;
  cmdline: string;
  bootMarker: string;
}

export type GuestBuildLog = ((msg: string) => void) | { info: (msg: string) => void };

export interface EnsureTestGuestOptions {
  /** Default: /var/cache/vkvm/guest. */
  cacheDir?: string;
  log?: GuestBuildLog;
  /** Default: the newest /boot/vmlinuz-* that has /lib/modules/<version>/modules.dep. */
  kernelVersion?: string;
  /**
   * Default true: unpack the bzImage's compressed payload into the plain ELF
   * vmlinux and boot it through its PVH entry point. Under TCG this skips the
   * in-guest decompression (~4-5 s of a ~10 s boot). Falls back to the bzImage
   * when the kernel has no PVH note or an unsupported payload compression.
   */
  pvh?: boolean;
}

interface Inputs {
  kernelVersion: string;
  kernelImage: string;
  modules: { name: string; file: string }[];
  libs: { guestPath: string; hostPath: string }[];
  applets: string[];
  packages: Record<string, string>;
  sourceHash: string;
}

function logger(log: GuestBuildLog | undefined): (msg: string) => void {
  if (!log) return () => {};
  if (typeof log === 'function') return log;
  return (msg) => log.info(msg);
}

export async function ensureTestGuest(opts: EnsureTestGuestOptions = {}): Promise<TestGuest> {
  const log = logger(opts.log);
  const cacheDir = path.resolve(opts.cacheDir ?? DEFAULT_GUEST_CACHE_DIR);
  const inputs = await collectInputs(opts.kernelVersion);
  const files = renderGuestFiles(inputs);
  const wantPvh = opts.pvh ?? true;
  const key = await cacheKey(inputs, files, wantPvh);
  const finalDir = path.join(cacheDir, key);
  const result: TestGuest = {
    kernelPath: path.join(finalDir, 'vmlinuz'),
    initrdPath: path.join(finalDir, 'initrd.img'),
    cmdline: GUEST_CMDLINE,
    bootMarker: GUEST_BOOT_MARKER,
  };
  const hit = await readManifest(finalDir);
  if (hit) {
    log(`test guest cache hit: ${finalDir}`);
    return { ...result, kernelPath: path.join(finalDir, hit.kernelFile) };
  }

  await fs.mkdir(cacheDir, { recursive: true, mode: 0o755 });
  await removeStaleTemps(cacheDir);
  const tmp = await fs.mkdtemp(path.join(cacheDir, `.tmp-${key.slice(0, 12)}-`));
  try {
    const started = Date.now();
    log(`building test guest ${key} (kernel ${inputs.kernelVersion}) in ${tmp}`);
    await fs.chmod(tmp, 0o755); // mkdtemp is 0700; QEMU may run as another user
    let kernelFile = 'vmlinuz';
    const vmlinux = wantPvh ? await extractPvhVmlinux(inputs.kernelImage, log) : undefined;
    if (vmlinux) {
      kernelFile = 'vmlinux';
      await writeDurable(path.join(tmp, kernelFile), vmlinux);
    } else {
      await fs.copyFile(inputs.kernelImage, path.join(tmp, kernelFile));
      await fs.chmod(path.join(tmp, kernelFile), 0o644);
    }
    const initrd = await buildInitramfs(inputs, files);
    await writeDurable(path.join(tmp, 'initrd.img'), initrd);
    const manifest = {
      key,
      recipe: RECIPE_VERSION,
      kernelVersion: inputs.kernelVersion,
      kernelFile,
      kernelBoot: kernelFile === 'vmlinux' ? 'pvh' : 'bzImage',
      packages: inputs.packages,
      modules: inputs.modules.map((m) => m.name),
      cmdline: GUEST_CMDLINE,
      bootMarker: GUEST_BOOT_MARKER,
      initrdBytes: initrd.length,
      builtAt: new Date().toISOString(),
    };
    // The manifest is written last: a directory with a manifest is complete.
    await writeDurable(path.join(tmp, 'manifest.json'), Buffer.from(JSON.stringify(manifest, null, 2) + '\n'));
    await publish(tmp, finalDir);
    log(`test guest ready in ${Date.now() - started} ms: ${finalDir} (initrd ${initrd.length} bytes)`);
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
  const built = await readManifest(finalDir);
  if (!built) throw new Error(`test guest cache entry ${finalDir} is incomplete after build`);
  return { ...result, kernelPath: path.join(finalDir, built.kernelFile) };
}

async function readManifest(dir: string): Promise<{ kernelFile: string } | undefined> {
  try {
    const m = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8')) as { kernelFile?: unknown };
    return typeof m.kernelFile === 'string' ? { kernelFile: m.kernelFile } : undefined;
  } catch {
    return undefined;
  }
}

async function isComplete(dir: string): Promise<boolean> {
  return (await readManifest(dir)) !== undefined;
}

/** Rename tmp → finalDir; losing the race to another builder is fine. */
async function publish(tmp: string, finalDir: string): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await fs.rename(tmp, finalDir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
      if (await isComplete(finalDir)) return; // another caller won
      // A directory without a manifest was not made by us: move it aside.
      const aside = `${finalDir}.stale-${process.pid}-${randomBytes(4).toString('hex')}`;
      await fs.rename(finalDir, aside).catch(() => {});
      await fs.rm(aside, { recursive: true, force: true });
    }
  }
  throw new Error(`could not publish test guest to ${finalDir}`);
}

async function removeStaleTemps(cacheDir: string): Promise<void> {
  const cutoff = Date.now() - 3600_000;
  for (const name of await fs.readdir(cacheDir).catch(() => [] as string[])) {
    if (!name.startsWith('.tmp-')) continue;
    const p = path.join(cacheDir, name);
    const st = await fs.stat(p).catch(() => undefined);
    if (st && st.mtimeMs < cutoff) await fs.rm(p, { recursive: true, force: true }).catch(() => {});
  }
}

async function writeDurable(file: string, data: Buffer): Promise<void> {
  const fh = await fs.open(file, 'w', 0o644);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

// ---------------------------------------------------------------- inputs

async function collectInputs(kernelVersionOpt: string | undefined): Promise<Inputs> {
  const kernelVersion = kernelVersionOpt ?? (await pickKernel());
  const kernelImage = `/boot/vmlinuz-${kernelVersion}`;
  await fs.access(kernelImage).catch(() => {
    throw new Error(`kernel image ${kernelImage} not found (install linux-image-amd64)`);
  });
  for (const bin of [BUSYBOX, QEMU_GA]) {
    await fs.access(bin).catch(() => {
      throw new Error(`${bin} not found (install busybox-static and qemu-guest-agent)`);
    });
  }
  const [modules, libs, applets, packages, sourceHash] = await Promise.all([
    resolveModules(kernelVersion),
    sharedLibraries(QEMU_GA),
    busyboxApplets(),
    packageVersions(kernelImage),
    builderSourceHash(),
  ]);
  return { kernelVersion, kernelImage, modules, libs, applets, packages, sourceHash };
}

async function pickKernel(): Promise<string> {
  const versions: string[] = [];
  for (const name of await fs.readdir('/boot')) {
    const m = /^vmlinuz-(.+)$/.exec(name);
    if (m?.[1] && existsSync(`/lib/modules/${m[1]}/modules.dep`)) versions.push(m[1]);
  }
  versions.sort((a, b) => b.localeCompare(a, 'en', { numeric: true }));
  if (!versions[0]) throw new Error('no /boot/vmlinuz-* with matching /lib/modules/*/modules.dep (install linux-image-amd64)');
  return versions[0];
}

const modName = (s: string) => path.basename(s).replace(/\.ko(\.(xz|zst|gz))?$/, '').replace(/-/g, '_');

async function resolveModules(kernelVersion: string): Promise<{ name: string; file: string }[]> {
  const dir = `/lib/modules/${kernelVersion}`;
  const deps = new Map<string, { file: string; deps: string[] }>();
  for (const line of (await fs.readFile(`${dir}/modules.dep`, 'utf8')).split('\n')) {
    const [file, rest] = line.split(':');
    if (!file || rest === undefined) continue;
    deps.set(modName(file), { file: path.join(dir, file), deps: rest.trim().split(/\s+/).filter(Boolean).map(modName) });
  }
  const builtin = new Set(
    (await fs.readFile(`${dir}/modules.builtin`, 'utf8').catch(() => '')).split('\n').filter(Boolean).map(modName),
  );
  const order: { name: string; file: string }[] = [];
  const seen = new Set<string>();
  const visit = (name: string, optional: boolean): void => {
    if (seen.has(name)) return;
    seen.add(name);
    const entry = deps.get(name);
    if (!entry) {
      if (builtin.has(name) || optional) return;
      throw new Error(`kernel ${kernelVersion} has no module ${name} and does not build it in`);
    }
    // modules.dep lists the deepest dependency last; modprobe loads from the end.
    for (const d of [...entry.deps].reverse()) visit(d, false);
    order.push({ name, file: entry.file });
  };
  for (const m of REQUIRED_MODULES) visit(m, false);
  for (const m of OPTIONAL_MODULES) visit(m, true);
  return order;
}

async function sharedLibraries(binary: string): Promise<{ guestPath: string; hostPath: string }[]> {
  const { stdout } = await execFileP('ldd', [binary]);
  const libs: { guestPath: string; hostPath: string }[] = [];
  for (const line of stdout.split('\n')) {
    const arrow = /^\s*(\S+)\s+=>\s+(\/\S+)\s+\(/.exec(line);
    const bare = /^\s*(\/\S+)\s+\(/.exec(line);
    if (arrow?.[2]) {
      // Install under the directory ldd resolved it in, named by its soname.
      libs.push({ guestPath: path.join(path.dirname(arrow[2]), arrow[1]!), hostPath: arrow[2] });
    } else if (bare?.[1]) {
      libs.push({ guestPath: bare[1], hostPath: bare[1] }); // the dynamic loader (PT_INTERP path)
    } else if (/not found/.test(line)) {
      throw new Error(`ldd ${binary}: ${line.trim()}`);
    }
  }
  if (!libs.some((l) => /ld-linux/.test(l.guestPath))) throw new Error(`ldd ${binary}: no dynamic loader listed`);
  return libs;
}

async function busyboxApplets(): Promise<string[]> {
  const { stdout } = await execFileP(BUSYBOX, ['--list']);
  return stdout.split('\n').map((s) => s.trim()).filter((s) => s && !s.includes('/'));
}

async function packageVersions(kernelImage: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const owner = async (file: string): Promise<string | undefined> => {
    try {
      const { stdout } = await execFileP('dpkg-query', ['-S', file]);
      return stdout.split(':')[0]?.trim();
    } catch {
      return undefined;
    }
  };
  const pkgs = new Set(['busybox-static', 'qemu-guest-agent']);
  const kpkg = await owner(kernelImage);
  if (kpkg) pkgs.add(kpkg);
  for (const p of pkgs) {
    try {
      const { stdout } = await execFileP('dpkg-query', ['-W', '-f=${Version}', p]);
      out[p] = stdout.trim();
    } catch {
      out[p] = 'unknown';
    }
  }
  return out;
}

/** Hash of the builder's TypeScript source, whether running from test/ or dist/. */
async function builderSourceHash(): Promise<string> {
  const here = fileURLToPath(import.meta.url);
  const candidates = [
    here.replace(/\.js$/, '.ts'),
    path.resolve(path.dirname(here), '../../../vmm/guest/build.ts'),
    here,
  ];
  for (const c of candidates) {
    try {
      return createHash('sha256').update(await fs.readFile(c)).digest('hex');
    } catch {
      /* next */
    }
  }
  return 'unknown';
}

async function cacheKey(inputs: Inputs, files: Map<string, string>, pvh: boolean): Promise<string> {
  const h = createHash('sha256');
  const fingerprint = async (p: string) => {
    const st = await fs.stat(p);
    return `${p}:${st.size}:${Math.floor(st.mtimeMs)}`;
  };
  const stamps = await Promise.all(
    [inputs.kernelImage, BUSYBOX, QEMU_GA, ...inputs.modules.map((m) => m.file), ...inputs.libs.map((l) => l.hostPath)].map(
      fingerprint,
    ),
  );
  h.update(
    JSON.stringify({
      recipe: RECIPE_VERSION,
      pvh,
      kernelVersion: inputs.kernelVersion,
      packages: inputs.packages,
      source: inputs.sourceHash,
      stamps,
      applets: inputs.applets,
      files: [...files.entries()],
    }),
  );
  return h.digest('hex').slice(0, 32);
}

// ---------------------------------------------------------------- kernel

/**
 * The bzImage's payload (located by the x86 boot protocol header, >= 2.08) is
 * the compressed ELF vmlinux. Returns it decompressed if it has a PVH entry
 * note (XEN_ELFNOTE_PHYS32_ENTRY), which QEMU's -kernel boots directly.
 */
async function extractPvhVmlinux(bzImage: string, log: (msg: string) => void): Promise<Buffer | undefined> {
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
    child.on('close', (code) =>
      code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`${cmd} exited ${code}: ${err.trim()}`)),
    );
    child.stdin.on('error', () => {}); // reported through the exit code
    child.stdin.end(input);
  });
}

// ---------------------------------------------------------------- guest files

/** The generated text files of the guest, keyed by guest path. */
function renderGuestFiles(inputs: Inputs): Map<string, string> {
  const files = new Map<string, string>();
  const moduleLines = inputs.modules.map((m) => `${m.name}`).join(' ');

  files.set(
    '/init',
    `#!/bin/sh
# vkvm test guest init (generated by vmm/guest/build.ts)
export PATH=/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /run/qemu-ga
hostname vkvm-guest
ip link set lo up 2>/dev/null

# Order matters: dependencies first (resolved from modules.dep at build time).
for m in ${moduleLines}; do
  insmod /lib/modules/$m.ko || echo "vkvm-guest: insmod $m failed" >/dev/ttyS0
done

# busybox acpid only opens the event devices present when it starts.
i=0
while [ $i -lt 50 ] && ! ls /dev/input/event* >/dev/null 2>&1; do usleep 20000; i=$((i+1)); done

echo "vkvm-guest: userspace up at $(cut -d' ' -f1 /proc/uptime)s" >/dev/ttyS0
echo ${GUEST_BOOT_MARKER} >/dev/ttyS0
exec /bin/init
`,
  );

  files.set(
    '/etc/inittab',
    `# busybox init: the serial root shell, the guest agent and the ACPI listener
ttyS0::respawn:-/bin/sh
::respawn:/bin/vkvm-qga
::respawn:/bin/acpid -f -c /etc/acpi -l /run/acpid.log -p /run/acpid.pid
::respawn:/bin/vkvm-dhcp
::respawn:/bin/httpd -f -p 80 -h /www
::respawn:/bin/httpd -f -p 8080 -h /www
::ctrlaltdel:/bin/reboot
::shutdown:/bin/sync
`,
  );

  files.set(
    '/bin/vkvm-qga',
    `#!/bin/sh
# Wait for the ${GUEST_AGENT_PORT} virtio-serial port, then run qemu-ga on it.
n=0
while :; do
  for f in /sys/class/virtio-ports/*/name; do
    [ -r "$f" ] || continue
    [ "$(cat "$f")" = ${GUEST_AGENT_PORT} ] || continue
    d=\${f%/name}
    dev=/dev/\${d##*/}
    [ -c "$dev" ] || continue
    mkdir -p /dev/virtio-ports
    ln -sf "$dev" /dev/virtio-ports/${GUEST_AGENT_PORT}
    exec /bin/qemu-ga -m virtio-serial -p "$dev" -f /run/qemu-ga.pid -t /run/qemu-ga -l /run/qemu-ga.log
  done
  # Poll fast right after boot, then slowly (the channel may never exist).
  if [ $n -lt 100 ]; then usleep 50000; n=$((n+1)); else sleep 2; fi
done
`,
  );

  // The pod network: the first NIC takes its address by DHCP (the node's
  // network plumbing answers); httpd on 80 and 8080 serves the address the
  // guest holds, so a test can tell it reached this guest and which port was
  // forwarded.
  files.set(
    '/bin/vkvm-dhcp',
    `#!/bin/sh
i=0
while [ $i -lt 100 ] && [ ! -e /sys/class/net/eth0 ]; do usleep 50000; i=$((i+1)); done
[ -e /sys/class/net/eth0 ] || exec sleep 3600
exec /bin/udhcpc -f -i eth0 -t 30 -T 1 -s /etc/udhcpc.script >/dev/null 2>&1
`,
  );
  files.set(
    '/etc/udhcpc.script',
    `#!/bin/sh
# busybox udhcpc calls this with the lease in the environment.
case "$1" in
  deconfig)
    ip addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/\${mask:-24}" dev "$interface"
    for r in $router; do ip route add default via "$r" dev "$interface"; break; done
    echo "vkvm-guest $ip" >/www/index.html
    echo "vkvm-guest: $interface has $ip" >/dev/ttyS0
    ;;
esac
exit 0
`,
  );
  files.set('/www/index.html', 'vkvm-guest (no address)\n');

  // busybox acpid maps the KEY_POWER input event to /etc/acpi/PWRF/00000080.
  files.set(
    '/etc/acpi/PWRF/00000080',
    `#!/bin/sh
echo "vkvm-guest: ACPI power button, powering off" >/dev/console
exec /bin/poweroff
`,
  );

  files.set('/etc/profile', `export PATH=/bin HOME=/root\nPS1='${GUEST_PROMPT}'\ncd /root\n`);
  files.set('/etc/passwd', 'root:x:0:0:root:/root:/bin/sh\n');
  files.set('/etc/group', 'root:x:0:\ntty:x:5:\n');
  files.set('/etc/hostname', 'vkvm-guest\n');
  files.set('/etc/modules.order', inputs.modules.map((m) => m.name).join('\n') + '\n');
  return files;
}

// ---------------------------------------------------------------- initramfs

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

async function buildInitramfs(inputs: Inputs, files: Map<string, string>): Promise<Buffer> {
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

// ---------------------------------------------------------------- CLI

function isMain(): boolean {
  const arg = process.argv[1];
  if (!arg) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(arg)).href;
  } catch {
    return false;
  }
}

if (isMain()) {
  const cacheDir = process.env.VKVM_GUEST_CACHE_DIR;
  ensureTestGuest({ ...(cacheDir ? { cacheDir } : {}), log: (m) => process.stderr.write(`${m}\n`) }).then(
    (g) => process.stdout.write(JSON.stringify(g, null, 2) + '\n'),
    (err: unknown) => {
      process.stderr.write(`${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
