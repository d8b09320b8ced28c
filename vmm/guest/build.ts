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
import { randomBytes } from 'node:crypto';
import { realpathSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { renderGuestFiles } from './guest-files.js';
import { buildInitramfs } from './initramfs.js';
import { extractPvhVmlinux } from './kernel.js';
import { cacheKey, collectInputs, DEFAULT_GUEST_CACHE_DIR, GUEST_BOOT_MARKER, GUEST_CMDLINE, RECIPE_VERSION } from './recipe.js';

export { DEFAULT_GUEST_CACHE_DIR, GUEST_AGENT_PORT, GUEST_BOOT_MARKER, GUEST_CMDLINE, GUEST_PROMPT } from './recipe.js';

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
      process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
