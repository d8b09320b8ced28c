// Build step after tsc (npm run build): bundles the compiled launcher,
// dist/launcher/main.js with every module it loads, into one CommonJS file,
// dist/launcher/bundle/main.cjs, beside its entry, start.cjs, which runs it through a V8 code cache
// (launcher/code-cache.ts). A launcher starts per VM, and Node loading some
// 200 modules one by one was the largest part of its start-up CPU: bundled, a
// start costs about 100 ms less (docs/benchmarks-log.md, 2026-11-24), and
// cached, V8 need not compile it again either. spawn.ts runs the bundle
// unless it is older than main.js (a later tsc run without this step), so a
// stale bundle never runs. The libvirt binding's native addon stays outside
// it, loaded from node_modules.
//
// esbuild comes with the dev dependencies (through tsx); where it cannot be
// loaded this step says so and the launcher runs unbundled.
import { mkdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The part of esbuild's API used here (its own types are not a declared dependency). */
interface Esbuild {
  build(options: Record<string, unknown>): Promise<{ warnings: unknown[] }>;
}

/** The part of esbuild's plugin API used here. */
interface PluginBuild {
  onLoad(o: { filter: RegExp }, load: (a: { path: string }) => Promise<{ contents: string; loader: 'js' } | undefined>): void;
}

const DIST_LAUNCHER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'launcher');

export const BUNDLE_DIR = 'bundle';

/**
 * Packages whose modules find files beside their installed selves at run
 * time (the libvirt binding loads its native addon relative to
 * import.meta.url): in the bundle that URL stays their installed file's,
 * relative to the bundle, so the bundle keeps working where the build put it.
 */
const FILES_BESIDE = /[\\/]node_modules[\\/]@unraid[\\/]libvirt[\\/].*\.js$/;

function keepInstalledUrl(out: string): { name: string; setup(b: PluginBuild): void } {
  return {
    name: 'keep-installed-url',
    setup(b) {
      b.onLoad({ filter: FILES_BESIDE }, async (a) => {
        const text = await readFile(a.path, 'utf8');
        if (!text.includes('import.meta.url')) return undefined;
        const rel = JSON.stringify(path.relative(out, a.path));
        return { contents: text.replaceAll('import.meta.url', `__vkvmInstalledUrl(${rel})`), loader: 'js' };
      });
    },
  };
}

/**
 * Bundles `<distLauncher>/main.js` into `<out>/main.cjs` and its entry into
 * `<out>/start.cjs` (default `<distLauncher>/bundle`); false when esbuild is
 * not there.
 */
export async function bundleLauncher(o: { distLauncher?: string; out?: string; log?: (msg: string) => void } = {}): Promise<boolean> {
  const distLauncher = o.distLauncher ?? DIST_LAUNCHER;
  const log = o.log ?? console.log;
  const moduleName = 'esbuild';
  const esbuild = (await import(moduleName).catch(() => undefined)) as Esbuild | undefined;
  if (!esbuild) {
    log('esbuild is not installed: the launcher runs unbundled (about 100 ms more CPU per VM start)');
    return false;
  }
  const out = o.out ?? path.join(distLauncher, BUNDLE_DIR);
  // Nothing of an earlier bundle's shape stays behind.
  await rm(out, { recursive: true, force: true });
  await mkdir(out, { recursive: true });
  const common = { bundle: true, platform: 'node', format: 'cjs', target: 'node20', logLevel: 'warning' };
  await esbuild.build({
    ...common,
    entryPoints: [path.join(distLauncher, 'main.js')],
    outfile: path.join(out, 'main.cjs'),
    plugins: [keepInstalledUrl(out)],
    // grpc-js requires proto-loader (and with it protobufjs's parser) only for
    // its channelz and ORCA services, which the launcher does not serve: left
    // out, it costs no start reading, hashing and deserialising it.
    external: ['@grpc/proto-loader'],
    // The bundle's own modules' import.meta.url is the bundle's.
    define: { 'import.meta.url': '__vkvmBundleUrl' },
    banner: {
      js: [
        "const __vkvmBundleUrl = require('node:url').pathToFileURL(__filename).href;",
        "const __vkvmInstalledUrl = (rel) => require('node:url').pathToFileURL(require('node:path').resolve(__dirname, rel)).href;",
      ].join(' '),
    },
    sourcemap: true,
  });
  await esbuild.build({ ...common, entryPoints: [path.join(distLauncher, 'bundle-entry.js')], outfile: path.join(out, 'start.cjs') });
  log(`bundled the launcher into ${path.join(out, 'main.cjs')}, run by ${path.join(out, 'start.cjs')}`);
  return true;
}

const invokedDirectly = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  bundleLauncher().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
