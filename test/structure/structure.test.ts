// The shape the architecture promises (docs/architecture.md), checked on the
// sources: no import cycles among product modules, no product module importing
// test/, provider/ reaching launcher/ only through its seam, and no product
// file so long it holds several jobs. Written here rather than with an eslint
// import plugin: that needs a TypeScript resolver for the `.js` specifiers and
// is many times slower for a check this small.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { packageRoot } from '../../provider/package-root.js';

const ROOT = packageRoot();
const PRODUCT_DIRS = ['provider', 'vmm', 'launcher', 'crds', 'deploy'];
const MAX_LINES = 420;
const LAUNCHER_SEAM = 'launcher/agent-api.ts';

function sources(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir)).flatMap((name) => {
    const rel = path.join(dir, name);
    // generated/: written by npm run build from a schema (not in git), not by hand.
    if (name === 'node_modules' || name === 'testdata' || name === 'generated') return [];
    if (statSync(path.join(ROOT, rel)).isDirectory()) return sources(rel);
    return rel.endsWith('.ts') && !rel.endsWith('.test.ts') && !rel.endsWith('.d.ts') ? [rel] : [];
  });
}

const IMPORT = /(?:import|export)[^'"]*?from\s+['"](\.[^'"]+)['"]/g;
const files = PRODUCT_DIRS.flatMap(sources);
const graph = new Map(
  files.map((file) => {
    const text = readFileSync(path.join(ROOT, file), 'utf8');
    const deps = [...text.matchAll(IMPORT)].map((m) => path.normalize(path.join(path.dirname(file), m[1]!)).replace(/\.js$/, '.ts'));
    return [file, { deps, lines: text.split('\n').length }] as const;
  }),
);

/** Strongly connected components with more than one module (Tarjan). */
function cycles(): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    for (const w of graph.get(v)?.deps ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) component.push(w);
    if (component.length > 1) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

t.test('product modules import no cycle', async (t) => {
  t.ok(files.length > 100, `found the product sources (${files.length})`);
  t.same(cycles(), [], 'no import cycles');
});

t.test('no product module imports test/', async (t) => {
  const offenders = [...graph].filter(([, g]) => g.deps.some((d) => d.startsWith('test/'))).map(([f]) => f);
  t.same(offenders, []);
});

t.test('provider/ reaches launcher/ only through its seam', async (t) => {
  const reached = new Set(
    [...graph].filter(([f]) => f.startsWith('provider/')).flatMap(([, g]) => g.deps.filter((d) => d.startsWith('launcher/'))),
  );
  t.same([...reached], [LAUNCHER_SEAM]);
});

t.test(`no product source file is over ${MAX_LINES} lines`, async (t) => {
  const long = [...graph].filter(([, g]) => g.lines > MAX_LINES).map(([f, g]) => `${f}: ${g.lines}`);
  t.same(long, []);
});
