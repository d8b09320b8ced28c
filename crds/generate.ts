// `npm run crds`: writes the CRD manifests rendered by crds/render.ts.
// crds/render.test.ts fails while the checked-in files differ from them.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { packageRoot } from '../provider/package-root.js';
import { renderCrdFiles } from './render.js';

const root = packageRoot();
for (const [path, content] of renderCrdFiles()) {
  await writeFile(join(root, path), content);
  process.stdout.write(`wrote ${path}\n`);
}
