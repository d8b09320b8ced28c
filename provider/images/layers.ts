// The files vkvm needs from an image — the disk, or a kernel and initrd —
// found as they appear in the image's root filesystem, without unpacking it:
// layers (uncompressed, gzip or zstd, told apart by their first bytes) are
// read top-down, and each wanted path is decided by the topmost layer that
// says anything about it, with whiteouts (`.wh.<name>`) and opaque
// directories (`.wh..wh..opq`) hiding what lies below, as overlayfs would.
// Only a wanted regular file's bytes are written, to the file the caller
// names. KubeVirt's rule for a containerDisk without `path`: exactly one
// entry directly under /disk, and it must be a regular file.
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { posix } from 'node:path';
import { createGunzip } from 'node:zlib';
import { ImageContentError } from './errors.js';
import { normalisePath, readTar, type TarEntry } from './tar.js';

/** A path inside the image (`/boot/vmlinuz`), or the one entry directly under a directory (KubeVirt's /disk). */
export type WantedFile = { path: string } | { onlyIn: string };

export interface FoundFile {
  /** Where in the image it was, e.g. /disk/disk.img. */
  path: string;
  sizeBytes: number;
}

/** Reads a file decompressed: gzip and zstd by their magic numbers, anything else as it is. */
export async function* decompressed(blobPath: string): AsyncGenerator<Buffer> {
  const head = Buffer.alloc(4);
  const fh = await open(blobPath, 'r');
  try {
    await fh.read(head, 0, 4, 0);
  } finally {
    await fh.close();
  }
  if (head[0] === 0x1f && head[1] === 0x8b) {
    yield* createReadStream(blobPath).pipe(createGunzip());
  } else if (head.readUInt32LE(0) === 0xfd2fb528) {
    // Node 20 has no zstd; Debian's zstd decompresses as a filter.
    const child = spawn('zstd', ['-dc', '--no-progress', blobPath], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', resolve);
    });
    try {
      yield* child.stdout;
      const code = await exited;
      if (code !== 0) throw new ImageContentError(`zstd data does not decompress: ${stderr.trim() || `zstd exited ${code}`}`);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  } else {
    yield* createReadStream(blobPath);
  }
}

const within = (p: string, dir: string) => dir === '' || p === dir || p.startsWith(`${dir}/`);

interface Query {
  wanted: WantedFile;
  /** Normalised directory the file is looked for in. */
  dir: string;
  /** Its name in `dir`; undefined for `onlyIn`. */
  name?: string;
  found?: { entry: TarEntry; layer: number };
  /** onlyIn: names found in upper layers (KubeVirt counts directories too). */
  names: Set<string>;
  /** Names whited out by the layers above the one being read. */
  hidden: Set<string>;
  /** No layer below can add to it (an opaque or deleted directory on its path). */
  closed: boolean;
  target: string;
}

function describe(q: Query): string {
  return q.name !== undefined ? `/${q.dir ? `${q.dir}/` : ''}${q.name}` : `the one file under /${q.dir}`;
}

/**
 * Finds each wanted file in `layers` (blob paths, bottom first) and writes the
 * regular files found to the `targets` the caller gave (same order), at most
 * `maxBytes` each. Errors name what is wrong in the image's terms.
 */
export async function extractFiles(
  layers: readonly string[],
  wanted: readonly WantedFile[],
  targets: readonly string[],
  maxBytes: number,
): Promise<FoundFile[]> {
  const queries: Query[] = wanted.map((w, i) => {
    const full = normalisePath('path' in w ? w.path : w.onlyIn);
    const q: Query = {
      wanted: w,
      dir: 'path' in w ? posix.dirname(full).replace(/^\.$/, '') : full,
      names: new Set(),
      hidden: new Set(),
      closed: false,
      target: targets[i]!,
    };
    if ('path' in w) q.name = posix.basename(full);
    return q;
  });
  try {
    for (let layer = layers.length - 1; layer >= 0; layer--) {
      const open = queries.filter((q) => !q.closed && (q.name === undefined || (!q.found && !q.hidden.has(q.name))));
      if (!open.length) break;
      await scanLayer(layers[layer]!, layer, open, maxBytes);
    }
    return queries.map((q) => {
      if (!q.found && q.names.size)
        throw new ImageContentError(`/${q.dir}/${[...q.names][0]} is a directory; the disk must be a regular file in the image`);
      if (!q.found)
        throw new ImageContentError(
          q.name !== undefined ? `the image has no file ${describe(q)}` : `the image has no file under /${q.dir}`,
        );
      return { path: `/${q.found.entry.path}`, sizeBytes: q.found.entry.size };
    });
  } catch (err) {
    await Promise.all(targets.map((t) => rm(t, { force: true })));
    throw err;
  }
}

/** One layer's say about each open query; upper layers' findings stand. */
async function scanLayer(blobPath: string, layer: number, queries: Query[], maxBytes: number): Promise<void> {
  const hideBelow = new Map<Query, Set<string>>(queries.map((q) => [q, new Set()]));
  const closeBelow = new Set<Query>();
  for await (const { entry, body } of readTar(decompressed(blobPath))) {
    const dir = posix.dirname(entry.path).replace(/^\.$/, '');
    const base = posix.basename(entry.path);
    for (const q of queries) {
      if (base === '.wh..wh..opq') {
        // An opaque directory on the way to the query's directory hides everything below this layer there.
        if (within(q.dir, dir)) closeBelow.add(q);
        continue;
      }
      if (base.startsWith('.wh.')) {
        const gone = dir ? `${dir}/${base.slice(4)}` : base.slice(4);
        if (dir === q.dir) hideBelow.get(q)!.add(base.slice(4));
        else if (within(q.dir, gone)) closeBelow.add(q);
        continue;
      }
      // The directory itself (or one above it) replaced by something that is not a directory.
      if (entry.type !== 'directory' && within(q.dir, entry.path)) {
        closeBelow.add(q);
        continue;
      }
      if (q.name === undefined && dir !== q.dir && within(dir, q.dir)) {
        // Something deeper down: its first component is an entry of the directory, even if the archive lists no entry for it.
        countName(q, entry.path.slice(q.dir ? q.dir.length + 1 : 0).split('/')[0]!);
        continue;
      }
      if (dir !== q.dir || q.hidden.has(base)) continue;
      // A later entry of the same layer replaces an earlier one; an upper layer's stands.
      const sameLayer = q.found?.layer === layer && q.found.entry.path === entry.path;
      if (q.name !== undefined) {
        if (base !== q.name || (q.found && !sameLayer)) continue;
      } else if (q.names.has(base)) {
        if (!sameLayer) continue;
      } else countName(q, base);
      q.found = { entry, layer };
      checkKind(entry);
      if (entry.size > maxBytes)
        throw new ImageContentError(`${describe(q)} is ${entry.size} bytes, more than the ${maxBytes} this node accepts`);
      await writeBody(body(), q.target);
    }
  }
  for (const q of queries) {
    for (const name of hideBelow.get(q)!) q.hidden.add(name);
    if (closeBelow.has(q)) q.closed = true;
  }
}

/** onlyIn: one more visible name in the directory; a second is KubeVirt's error. */
function countName(q: Query, name: string): void {
  if (q.hidden.has(name) || q.names.has(name)) return;
  q.names.add(name);
  if (q.names.size > 1) {
    throw new ImageContentError(
      `the image has more than one entry under /${q.dir} (${[...q.names].join(', ')}); KubeVirt boots a containerDisk with exactly one, or the one containerDisk.path names`,
    );
  }
}

function checkKind(entry: TarEntry): void {
  const what = {
    symlink: `a symbolic link (to ${entry.linkname})`,
    hardlink: `a hard link (to /${entry.linkname})`,
    directory: 'a directory',
    other: 'not a regular file',
  } as const;
  if (entry.type !== 'file')
    throw new ImageContentError(`/${entry.path} is ${what[entry.type]}; the disk or kernel must be a regular file in the image`);
}

async function writeBody(body: AsyncIterable<Buffer>, target: string): Promise<void> {
  const fh = await open(target, 'w', 0o600);
  try {
    for await (const chunk of body) await fh.write(chunk);
    await fh.sync();
  } finally {
    await fh.close();
  }
}
