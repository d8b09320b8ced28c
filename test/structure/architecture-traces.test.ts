// docs/architecture.md's traces name a file and a function at each step; a
// rename that forgets the map makes it lie. Each trace row's vkvm files must
// exist (a path relative to its room, e.g. `replicas/pool-plan.ts`, resolves
// by its unique suffix) and each name in its function column must occur in
// one of them. A Go file not in the repo is a sidecar's or Kubernetes' own
// (`pkg/…`): rows that name only such outside components are not checked.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { packageRoot } from '../../provider/package-root.js';

const ROOT = packageRoot();
const DOCS = ['docs/architecture.md', 'docs/joining.md', 'docs/networking.md', 'docs/pods.md'];
const FILE = /`([\w./-]+\.(?:ts|sh|go))`/g;
const outside = (named: string) => named.endsWith('.go') && resolve(named) === undefined;
const NAME = /`([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)`/g;

function walk(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = path.join(dir, e.name);
    if (e.name === 'node_modules' || e.name === 'dist' || e.name.startsWith('.')) return [];
    return e.isDirectory() ? walk(rel) : [rel];
  });
}

const repoFiles = ['provider', 'vmm', 'launcher', 'crds', 'deploy', 'test'].flatMap(walk);

/** The repo file a doc names: the path itself, or the one file whose path ends with it. */
function resolve(named: string): string | undefined {
  if (repoFiles.includes(named)) return named;
  const matches = repoFiles.filter((f) => f.endsWith(`/${named}`));
  return matches.length === 1 ? matches[0] : undefined;
}

interface Row {
  doc: string;
  line: number;
  files: string[];
  names: string[];
}

function traceRows(doc: string): Row[] {
  return readFileSync(path.join(ROOT, doc), 'utf8')
    .split('\n')
    .flatMap((text, i) => {
      if (!text.startsWith('|')) return [];
      const cells = text.slice(1, text.lastIndexOf('|')).split('|');
      if (cells.length < 4) return [];
      const files = [...cells.at(-2)!.matchAll(FILE)].map((m) => m[1]!).filter((f) => !outside(f));
      const names = [...cells.at(-1)!.matchAll(NAME)].map((m) => m[1]!);
      return files.length > 0 && names.length > 0 ? [{ doc, line: i + 1, files, names }] : [];
    });
}

const rows = DOCS.flatMap(traceRows);

t.test('the traces have rows to check', async (t) => {
  t.ok(rows.length > 100, `${rows.length} rows`);
});

t.test('every file a trace names exists', async (t) => {
  const missing = rows.flatMap((r) => r.files.filter((f) => resolve(f) === undefined).map((f) => `${r.doc}:${r.line} ${f}`));
  t.same(missing, []);
});

t.test('every function a trace names occurs in one of its files', async (t) => {
  const missing = rows.flatMap((r) => {
    const text = r.files.flatMap((f) => {
      const file = resolve(f);
      return file === undefined ? [] : [readFileSync(path.join(ROOT, file), 'utf8')];
    });
    // `A.b` names b on A: b must occur (a gRPC method's name may be capitalised in the doc and not in the code).
    const absent = (name: string) => {
      const last = name.split('.').at(-1)!;
      const word = new RegExp(`\\b(?:${last}|${last[0]!.toLowerCase()}${last.slice(1)})\\b`);
      return !text.some((s) => word.test(s));
    };
    return r.names.filter(absent).map((n) => `${r.doc}:${r.line} ${n}`);
  });
  t.same(missing, []);
});
