// The launcher bundle's V8 code cache: used only from a private directory,
// written once a start compiled without it, and a bad cache falls back.
import { chmodSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { cacheFileName, loadedCodeCache, privateDirProblem, runCachedBundle } from './code-cache.js';

/** A CommonJS bundle that reports what Node's wrapper handed it. */
const BUNDLE = `
const path = require('node:path');
globalThis.vkvmCodeCacheTest = { file: path.basename(__filename), dir: __dirname, isExports: this === module.exports, sum: [1, 2, 3].reduce((a, b) => a + b) };
`;

t.test('the cache file is named for the bundle text and the Node version', async (t) => {
  const a = cacheFileName('x');
  t.same(
    {
      again: cacheFileName('x') === a,
      otherText: cacheFileName('y') === a,
      otherNode: cacheFileName('x', 'v0.0.1') === a,
      shape: /^[0-9a-f]{64}\.v8$/.test(a),
    },
    { again: true, otherText: false, otherNode: false, shape: true },
  );
});

t.test('a cache directory is used only when it is a directory of this user with no access for others', async (t) => {
  const root = t.testdir({ open: {}, file: 'x' });
  chmodSync(path.join(root, 'open'), 0o755);
  const uid = process.getuid!();
  t.match(
    {
      made: privateDirProblem(path.join(root, 'new', 'cache'), uid),
      open: privateDirProblem(path.join(root, 'open'), uid),
      file: privateDirProblem(path.join(root, 'file'), uid),
      otherUser: privateDirProblem(path.join(root, 'new', 'cache'), uid + 1),
    },
    { made: undefined, open: /open to others \(mode 755\)/, file: /not a directory|EEXIST/, otherUser: /belongs to uid/ },
  );
});

t.test('the first run compiles and writes the cache, the next uses it, and a bad cache is rejected and written again', async (t) => {
  // Each run from its own copy: V8 keeps what it compiled per source and file name, and would not read a cache for a script it already holds.
  const runs = ['first', 'second', 'third', 'fourth'];
  const dir = t.testdir(Object.fromEntries(runs.map((r) => [r, { 'main.cjs': BUNDLE }])));
  const cacheDir = path.join(dir, 'cache');
  t.teardown(() => void delete (globalThis as Record<string, unknown>).vkvmCodeCacheTest);
  const run = (r: string) => {
    const c = runCachedBundle({ file: path.join(dir, r, 'main.cjs'), cacheDir });
    c.save();
    return { state: c.state, problem: c.problem, seen: (globalThis as Record<string, unknown>).vkvmCodeCacheTest };
  };
  const first = run('first');
  const files = readdirSync(cacheDir);
  const second = run('second');
  writeFileSync(path.join(cacheDir, files[0]!), 'not a V8 cache');
  const third = run('third');
  const fourth = run('fourth');
  t.same(
    { first, files, second: second.state, third: third.state, fourth: fourth.state, handle: loadedCodeCache()?.state },
    {
      first: { state: 'miss', problem: undefined, seen: { file: 'main.cjs', dir: path.join(dir, 'first'), isExports: true, sum: 6 } },
      files: [cacheFileName(BUNDLE)],
      second: 'hit',
      third: 'rejected',
      fourth: 'hit',
      handle: 'hit',
    },
  );
});

t.test('from a directory open to others the cache is off: the bundle runs and nothing is written', async (t) => {
  const dir = t.testdir({ 'main.cjs': BUNDLE, cache: {} });
  const cacheDir = path.join(dir, 'cache');
  chmodSync(cacheDir, 0o777);
  t.teardown(() => void delete (globalThis as Record<string, unknown>).vkvmCodeCacheTest);
  const c = runCachedBundle({ file: path.join(dir, 'main.cjs'), cacheDir });
  c.save();
  t.match(
    { state: c.state, problem: c.problem, ran: (globalThis as Record<string, unknown>).vkvmCodeCacheTest, files: readdirSync(cacheDir) },
    { state: 'off', problem: /open to others/, ran: { sum: 6 }, files: [] },
  );
});
