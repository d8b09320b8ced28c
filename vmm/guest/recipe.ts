// The test guest's recipe: what goes into it (constants, the host's kernel,
// modules, libraries and package versions) and the cache key hashing all of
// it with the builder's own source, so any change yields a new guest.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { NOCLOUD_MODULES } from './nocloud.js';
import { DROPBEAR } from './ssh-server.js';
import { NETCAT } from './udp-echo.js';

const execFileP = promisify(execFile);

/** Bump when the guest layout changes in a way the source hash would miss. */
export const RECIPE_VERSION = 1;

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
// isofs: a test can mount the cloud-init seed, a filesystem the guest agent reports (guest-get-fsinfo).
const OPTIONAL_MODULES = ['virtio_blk', 'virtio_net', 'isofs'];

export const BUSYBOX = '/bin/busybox';
export const QEMU_GA = '/usr/sbin/qemu-ga';

export interface Inputs {
  kernelVersion: string;
  kernelImage: string;
  /** Every module in the initramfs, dependencies first. */
  modules: { name: string; file: string }[];
  /** The modules /init loads; the rest are the NoCloud step's, loaded by it after boot. */
  bootModules: string[];
  libs: { guestPath: string; hostPath: string }[];
  applets: string[];
  packages: Record<string, string>;
  sourceHash: string;
}

export async function collectInputs(kernelVersionOpt: string | undefined): Promise<Inputs> {
  const kernelVersion = kernelVersionOpt ?? (await pickKernel());
  const kernelImage = `/boot/vmlinuz-${kernelVersion}`;
  await fs.access(kernelImage).catch(() => {
    throw new Error(`kernel image ${kernelImage} not found (install linux-image-amd64)`);
  });
  for (const bin of [BUSYBOX, QEMU_GA, DROPBEAR, NETCAT]) {
    await fs.access(bin).catch(() => {
      throw new Error(`${bin} not found (install busybox-static, qemu-guest-agent, dropbear-bin and netcat-traditional)`);
    });
  }
  const [{ modules, bootModules }, libs, applets, packages, sourceHash] = await Promise.all([
    resolveModules(kernelVersion),
    sharedLibrariesOf([QEMU_GA, DROPBEAR, NETCAT]),
    busyboxApplets(),
    packageVersions(kernelImage),
    builderSourceHash(),
  ]);
  return { kernelVersion, kernelImage, modules, bootModules, libs, applets, packages, sourceHash };
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

const modName = (s: string) =>
  path
    .basename(s)
    .replace(/\.ko(\.(xz|zst|gz))?$/, '')
    .replace(/-/g, '_');

async function resolveModules(kernelVersion: string): Promise<Pick<Inputs, 'modules' | 'bootModules'>> {
  const dir = `/lib/modules/${kernelVersion}`;
  const deps = new Map<string, { file: string; deps: string[] }>();
  for (const line of (await fs.readFile(`${dir}/modules.dep`, 'utf8')).split('\n')) {
    const [file, rest] = line.split(':');
    if (!file || rest === undefined) continue;
    deps.set(modName(file), { file: path.join(dir, file), deps: rest.trim().split(/\s+/).filter(Boolean).map(modName) });
  }
  const builtin = new Set((await fs.readFile(`${dir}/modules.builtin`, 'utf8').catch(() => '')).split('\n').filter(Boolean).map(modName));
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
  const bootModules = order.map((m) => m.name);
  for (const m of NOCLOUD_MODULES) visit(m, false);
  return { modules: order, bootModules };
}

/** The libraries of every binary, each once. */
async function sharedLibrariesOf(binaries: string[]): Promise<{ guestPath: string; hostPath: string }[]> {
  const all = (await Promise.all(binaries.map(sharedLibraries))).flat();
  return [...new Map(all.map((l) => [l.guestPath, l])).values()];
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
  return stdout
    .split('\n')
    .map((s) => s.trim())
    .filter((s) => s && !s.includes('/'));
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
  const pkgs = new Set(['busybox-static', 'qemu-guest-agent', 'dropbear-bin', 'netcat-traditional']);
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

/**
 * Hash of the builder's TypeScript sources (every module of this folder),
 * whether running from source or from dist/ (the .ts files stay in the tree).
 */
async function builderSourceHash(): Promise<string> {
  const here = path.dirname(fileURLToPath(import.meta.url));
  for (const dir of [here, path.resolve(here, '../../../vmm/guest')]) {
    const names = (await fs.readdir(dir).catch(() => [])).filter((n) => n.endsWith('.ts') && !n.endsWith('.test.ts')).sort();
    if (names.length === 0) continue;
    const h = createHash('sha256');
    for (const n of names)
      h.update(n)
        .update('\0')
        .update(await fs.readFile(path.join(dir, n)))
        .update('\0');
    return h.digest('hex');
  }
  return 'unknown';
}

export async function cacheKey(inputs: Inputs, files: Map<string, string>, pvh: boolean): Promise<string> {
  const h = createHash('sha256');
  const fingerprint = async (p: string) => {
    const st = await fs.stat(p);
    return `${p}:${st.size}:${Math.floor(st.mtimeMs)}`;
  };
  const stamps = await Promise.all(
    [
      inputs.kernelImage,
      BUSYBOX,
      QEMU_GA,
      DROPBEAR,
      NETCAT,
      ...inputs.modules.map((m) => m.file),
      ...inputs.libs.map((l) => l.hostPath),
    ].map(fingerprint),
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
