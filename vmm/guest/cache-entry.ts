// Cache entries of built guests (the kernel and initramfs, the bootable
// disk): each is built in a temporary sibling directory and renamed into
// place, so concurrent builders never see a half-written entry; a complete
// entry is one whose manifest was written, last.
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

/** A fresh build directory under `cacheDir`, readable by QEMU's user (mkdtemp makes 0700); old abandoned ones go first. */
export async function newBuildDir(cacheDir: string, key: string): Promise<string> {
  await fs.mkdir(cacheDir, { recursive: true, mode: 0o755 });
  await removeStaleTemps(cacheDir);
  const tmp = await fs.mkdtemp(path.join(cacheDir, `.tmp-${key.slice(0, 12)}-`));
  await fs.chmod(tmp, 0o755);
  return tmp;
}

/** Rename tmp → finalDir; losing the race to another builder is fine. */
export async function publishEntry(tmp: string, finalDir: string, isComplete: (dir: string) => Promise<boolean>): Promise<void> {
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
  throw new Error(`could not publish ${finalDir}`);
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

export async function writeDurable(file: string, data: Buffer): Promise<void> {
  const fh = await fs.open(file, 'w', 0o644);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
}
