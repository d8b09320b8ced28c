// The launcher's entry when bundled: deploy/bundle-launcher.ts makes this
// start.cjs beside the bundle, main.cjs, which it runs through the code cache
// (code-cache.ts). Node sets argv[1] to this script's absolute path.
import path from 'node:path';
import { DEFAULT_CODE_CACHE_DIR, runCachedBundle } from './code-cache.js';

runCachedBundle({ file: path.join(path.dirname(process.argv[1]!), 'main.cjs'), cacheDir: DEFAULT_CODE_CACHE_DIR });
