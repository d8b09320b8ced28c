// Build step after tsc (npm run build): bundles the compiled launcher,
// dist/launcher/main.js with every module it loads, into one file,
// dist/launcher/bundle/main.js, beside a copy of launcher.proto. A launcher
// starts per VM, and Node loading some 200 modules one by one was the
// largest part of its start-up CPU: bundled, a start costs about 100 ms less
// (docs/benchmarks-log.md, 2026-11-24). spawn.ts runs the bundle unless it is
// older than main.js (a later tsc run without this step), so a stale bundle
// never runs. The native libvirt binding stays outside it.
//
// esbuild comes with the dev dependencies (through tsx); where it cannot be
// loaded this step says so and the launcher runs unbundled.
import { copyFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The part of esbuild's API used here (its own types are not a declared dependency). */
interface Esbuild {
  build(options: Record<string, unknown>): Promise<{ warnings: unknown[] }>;
}

const DIST_LAUNCHER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'launcher');

export const BUNDLE_DIR = 'bundle';

/**
 * Bundles `<distLauncher>/main.js` into `<out>/main.js` (default
 * `<distLauncher>/bundle`); false when esbuild is not there.
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
  await mkdir(out, { recursive: true });
  await esbuild.build({
    entryPoints: [path.join(distLauncher, 'main.js')],
    outfile: path.join(out, 'main.js'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    // A native addon, loaded from node_modules at run time.
    external: ['@unraid/libvirt'],
    // CommonJS modules inside the bundle still call require().
    banner: {
      js: "import { createRequire as __vkvmCreateRequire } from 'node:module'; const require = __vkvmCreateRequire(import.meta.url);",
    },
    sourcemap: true,
    logLevel: 'warning',
  });
  // proto/load.ts looks for launcher.proto beside the module that loads it.
  const proto = path.resolve(distLauncher, '..', '..', 'launcher', 'proto', 'launcher.proto');
  await copyFile(proto, path.join(out, 'launcher.proto'));
  log(`bundled the launcher into ${path.join(out, 'main.js')}`);
  return true;
}

const invokedDirectly = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  bundleLauncher().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
