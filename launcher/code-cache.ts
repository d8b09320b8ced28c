// A V8 code cache for the launcher's bundle. A launcher starts per VM, and
// V8 compiling the 1.5 MB bundle (and each function on its first call) was
// the largest part of its start-up CPU after Node's own. The first launcher
// of a bundle compiles it as usual and, once it serves, writes what V8
// compiled; later launchers hand that to V8 instead of compiling again.
//
// Node 20 has no compile cache of its own (module.enableCompileCache came in
// 22) and caches code only for scripts, so the bundle is CommonJS run through
// vm.Script, with Node's CommonJS wrapper. v8-compile-cache does the same for
// every module, keeping its cache in /tmp; code run as root must not come
// from a directory another user could have written, hence this small module.
//
// The cache is code: its directory must be this user's alone (checked on
// every start, made so when missing), or it is not used. V8 rejects a cache
// made by another V8 or with other flags; the file name holds a hash of the
// bundle's text and the Node version, since V8 only checks the text's length.
// Any failure falls back to compiling, and the state is reported (hit, miss,
// rejected, off) so a bench can count it.
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import vm from 'node:vm';

export type CodeCacheState = 'hit' | 'miss' | 'rejected' | 'off';

/** Root's, like the rest of the node's vkvm caches. */
export const DEFAULT_CODE_CACHE_DIR = '/var/cache/vkvm/launcher-code';

/** Caches of other bundles kept beside the current one (several builds may run launchers on one host). */
const KEEP_FILES = 8;

export interface CodeCache {
  state: CodeCacheState;
  /** Why the cache is off, or why writing it failed. */
  problem?: string;
  /** Writes the cache if this start did not use one; call once the launcher serves (V8 then holds its start-up's compiled functions). */
  save(): void;
}

const HANDLE = Symbol.for('vkvm.launcher.codeCache');

/** The cache the bundle was loaded through, seen from inside the bundle; undefined when the launcher runs unbundled. */
export function loadedCodeCache(): CodeCache | undefined {
  return (globalThis as Record<symbol, CodeCache | undefined>)[HANDLE];
}

/** The cache file's name for a bundle's text: V8 checks only the text's length and its own version and flags. */
export function cacheFileName(source: string, nodeVersion = process.version): string {
  return `${createHash('sha256').update(nodeVersion).update('\0').update(source).digest('hex')}.v8`;
}

/** Why `dir` may not hold code for this process to run (made, private, when missing), or undefined when it may. */
export function privateDirProblem(dir: string, uid = process.getuid?.()): string | undefined {
  if (uid === undefined) return 'no user ids on this platform';
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const s = lstatSync(dir);
    if (!s.isDirectory()) return `${dir} is not a directory`;
    if (s.uid !== uid) return `${dir} belongs to uid ${s.uid}, not ${uid}`;
    if ((s.mode & 0o077) !== 0) return `${dir} is open to others (mode ${(s.mode & 0o777).toString(8)})`;
    return undefined;
  } catch (err) {
    return `${dir}: ${(err as Error).message}`;
  }
}

function readIfThere(file: string): Buffer | undefined {
  try {
    return readFileSync(file);
  } catch {
    return undefined;
  }
}

/** Writes `data` as `file` whole (a concurrent reader sees the old file or the new one), then drops all but the newest caches. */
function writeCache(dir: string, file: string, data: Buffer): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, data, { mode: 0o600, flag: 'wx' });
  renameSync(tmp, file);
  const caches = readdirSync(dir)
    .filter((n) => n.endsWith('.v8'))
    .map((n) => ({ n, mtimeMs: statSync(path.join(dir, n), { throwIfNoEntry: false })?.mtimeMs ?? 0 }))
    .sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const old of caches.slice(KEEP_FILES)) rmSync(path.join(dir, old.n), { force: true });
}

/**
 * Runs the CommonJS bundle `file` as Node would run it as the main module,
 * compiled through the cache in `cacheDir`, and returns how the cache served.
 * The bundle reaches the same object through loadedCodeCache().
 */
export function runCachedBundle(o: { file: string; cacheDir: string; uid?: number }): CodeCache {
  const source = readFileSync(o.file, 'utf8');
  const problem = privateDirProblem(o.cacheDir, o.uid);
  const cacheFile = path.join(o.cacheDir, cacheFileName(source));
  const cachedData = problem === undefined ? readIfThere(cacheFile) : undefined;
  // Node's CommonJS wrapper, on the bundle's first line so its line numbers hold.
  const script = new vm.Script(`(function (exports, require, module, __filename, __dirname) { ${source}\n})`, {
    filename: o.file,
    ...(cachedData ? { cachedData } : {}),
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const state: CodeCacheState = problem !== undefined ? 'off' : !cachedData ? 'miss' : script.cachedDataRejected ? 'rejected' : 'hit';
  const cache: CodeCache = {
    state,
    ...(problem !== undefined ? { problem } : {}),
    save() {
      if (cache.state !== 'miss' && cache.state !== 'rejected') return;
      try {
        writeCache(o.cacheDir, cacheFile, script.createCachedData());
      } catch (err) {
        cache.problem = `writing ${cacheFile}: ${(err as Error).message}`;
      }
    },
  };
  (globalThis as Record<symbol, CodeCache>)[HANDLE] = cache;
  const module = { exports: {} };
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  wrapper.call(module.exports, module.exports, createRequire(o.file), module, o.file, path.dirname(o.file));
  return cache;
}
