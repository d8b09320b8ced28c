// Test support: csi-sanity, the CSI conformance suite
// (github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity), built with
// `go install` straight from the Go module proxy at a pinned version (the
// module's own go.mod and go.sum; nothing vendored here) and cached by a hash
// of the version and the Go release like the control plane, under
// /var/cache/vkvm/test-tools, a build cache the fresh host view keeps.
// deploy/setup.sh builds it; a test on a machine without it builds it first
// (about 30 s on 2 cores).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { defaultCacheDir } from '../../deploy/cluster/cluster.js';

const execFileP = promisify(execFile);

export const CSI_TEST_MODULE = 'github.com/kubernetes-csi/csi-test/v5';
export const CSI_TEST_VERSION = 'v5.6.0';

async function recipeHash(): Promise<string> {
  const goVersion = (await execFileP('go', ['version'])).stdout;
  return createHash('sha256')
    .update(`${CSI_TEST_MODULE}@${CSI_TEST_VERSION} install -trimpath\0`)
    .update(goVersion)
    .digest('hex')
    .slice(0, 16);
}

/** The path of a built csi-sanity, building it when the cache has none for this version and Go. */
export async function ensureCsiSanity(cacheDir = defaultCacheDir()): Promise<string> {
  const dir = join(cacheDir, 'test-tools', 'csi-sanity', await recipeHash());
  const bin = join(dir, 'csi-sanity');
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true });
  const gobin = await mkdtemp(join(dir, '.build-'));
  try {
    await execFileP('go', ['install', '-trimpath', `${CSI_TEST_MODULE}/cmd/csi-sanity@${CSI_TEST_VERSION}`], {
      env: { ...process.env, GOBIN: gobin, CGO_ENABLED: '0' },
      maxBuffer: 4 << 20,
    });
    await rename(join(gobin, 'csi-sanity'), bin);
    return bin;
  } finally {
    await rm(gobin, { recursive: true, force: true });
  }
}

// `node dist/test/helpers/csi-sanity.js` (deploy/setup.sh): build it now and print its path.
if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  ensureCsiSanity().then(
    (bin) => process.stdout.write(`${bin}\n`),
    (err: unknown) => {
      process.stderr.write(`building csi-sanity failed: ${(err as Error).message}\n`);
      process.exit(1);
    },
  );
}
