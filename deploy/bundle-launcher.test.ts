// The launcher bundle from the compiled launcher (npm test builds first), and
// which entry spawn.ts picks.
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync, utimesSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { launcherEntry } from '../launcher/spawn.js';
import { packageRoot } from '../provider/package-root.js';
import { bundleLauncher } from './bundle-launcher.js';

t.test('the compiled launcher bundles into one file that loads every module it needs', async (t) => {
  const distLauncher = path.join(packageRoot(), 'dist', 'launcher');
  if (!existsSync(path.join(distLauncher, 'main.js'))) throw new Error('build first (npm run build): dist/launcher/main.js is missing');
  const out = t.testdir();
  const said: string[] = [];
  t.equal(await bundleLauncher({ distLauncher, out, log: (m) => said.push(m) }), true, `bundled: ${said.join('; ')}`);
  // Without arguments it stops at its first check, which runs only after every import (gRPC, pino, the native libvirt binding) loaded.
  const r = spawnSync(process.execPath, [path.join(out, 'start.cjs')], { encoding: 'utf8' });
  t.match({ status: r.status, stderr: r.stderr }, { status: 1, stderr: /--uid is required/ });
  t.notMatch(r.stderr, /Cannot find module|ERR_MODULE_NOT_FOUND|Dynamic require/, 'no module is missing from it');
});

t.test('spawn runs the bundle unless it is missing or older than main.js', async (t) => {
  const dir = t.testdir({ 'main.js': '', bundle: { 'start.cjs': '' } });
  const at = (f: string, s: number) => utimesSync(path.join(dir, f), s, s);
  at('main.js', 1000);
  at('bundle/start.cjs', 2000);
  const fresh = launcherEntry(dir);
  at('main.js', 3000);
  const stale = launcherEntry(dir);
  rmSync(path.join(dir, 'bundle'), { recursive: true });
  t.same(
    { fresh, stale, none: launcherEntry(dir) },
    { fresh: path.join(dir, 'bundle', 'start.cjs'), stale: path.join(dir, 'main.js'), none: path.join(dir, 'main.js') },
  );
});
