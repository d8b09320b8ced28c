// Finds the vkvm checkout or install root (where package.json lives), so code
// running from dist/ or from sources under tap resolves crds/, deploy/ and
// deploy/cluster/ the same way.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'provider'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('vkvm package root not found above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

/** The vkvm command line, as built (what `vkvm` runs). */
export const cliPath = (): string => join(packageRoot(), 'dist', 'provider', 'cli', 'main.js');
