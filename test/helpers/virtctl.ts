// Test support (no production code imports it): KubeVirt's own virtctl, built
// from the public Go module proxy in a throw-away wrapper module, cached by a
// hash of this recipe and the Go version like the control plane. Nothing of
// KubeVirt's is kept in this repository: the wrapper requires
// kubevirt.io/kubevirt, api and client-go at one version and copies that
// version's replace block, pointing its in-tree staging replaces at the
// published modules (glog at the release KubeVirt vendors).
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { defaultCacheDir } from '../../deploy/cluster/cluster.js';

const execFileP = promisify(execFile);

export const VIRTCTL_VERSION = 'v1.5.1';
/** KubeVirt's replaces of its own tree, and what the wrapper uses instead. */
const STAGING_REPLACES: ReadonlyArray<[string, string]> = [
  ['./staging/src/github.com/golang/glog', 'github.com/golang/glog v1.2.2'],
  ['./staging/src/kubevirt.io/api', `kubevirt.io/api ${VIRTCTL_VERSION}`],
  ['./staging/src/kubevirt.io/client-go', `kubevirt.io/client-go ${VIRTCTL_VERSION}`],
];

/** The wrapper's go.mod, from KubeVirt's go.mod at VIRTCTL_VERSION. */
export function wrapperGoMod(kubevirtGoMod: string): string {
  const block = /^replace \($[\s\S]*?^\)$/m.exec(kubevirtGoMod)?.[0];
  if (!block) throw new Error(`kubevirt.io/kubevirt ${VIRTCTL_VERSION}'s go.mod has no replace block`);
  let replaces = block;
  for (const [from, to] of STAGING_REPLACES) replaces = replaces.replace(`=> ${from}`, `=> ${to}`);
  if (replaces.includes('=> ./')) throw new Error(`unexpected local replace left in:\n${replaces}`);
  const requires = ['kubevirt.io/kubevirt', 'kubevirt.io/api', 'kubevirt.io/client-go'].map((m) => `\t${m} ${VIRTCTL_VERSION}`).join('\n');
  return `module vkvm.test/virtctl\n\ngo 1.23.0\n\nrequire (\n${requires}\n)\n\n${replaces}\n`;
}

async function recipeHash(): Promise<string> {
  const goVersion = (await execFileP('go', ['version'])).stdout;
  return createHash('sha256')
    .update(VIRTCTL_VERSION)
    .update('ldflags-v1')
    .update(JSON.stringify(STAGING_REPLACES))
    .update(goVersion)
    .digest('hex')
    .slice(0, 16);
}

/** The path of a built virtctl, building it (minutes on 2 cores) when the cache has none. */
export async function ensureVirtctl(cacheDir = defaultCacheDir()): Promise<string> {
  const dir = join(cacheDir, 'virtctl', await recipeHash());
  const bin = join(dir, 'virtctl');
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true });
  const work = await mkdtemp(join(tmpdir(), 'vkvm-virtctl-build-'));
  try {
    const env = { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=mod' };
    const { stdout } = await execFileP('go', ['mod', 'download', '-json', `kubevirt.io/kubevirt@${VIRTCTL_VERSION}`], {
      cwd: work,
      env,
      maxBuffer: 1 << 20,
    });
    const info = JSON.parse(stdout) as { GoMod: string };
    await writeFile(join(work, 'go.mod'), wrapperGoMod(await readFile(info.GoMod, 'utf8')));
    const tmp = `${bin}.${process.pid}.tmp`;
    await new Promise<void>((resolve, reject) => {
      // virtctl refuses to run with its unstamped version ("$Format:%h$ is not a valid semver identifier").
      const ldflags = `-X kubevirt.io/client-go/version.gitVersion=${VIRTCTL_VERSION} -X kubevirt.io/client-go/version.gitTreeState=clean`;
      const child = spawn('go', ['build', '-trimpath', `-ldflags=${ldflags}`, '-o', tmp, 'kubevirt.io/kubevirt/cmd/virtctl'], {
        cwd: work,
        env,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-8000)));
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`building virtctl failed (exit ${code}):\n${stderr}`))));
    });
    await rename(tmp, bin);
    return bin;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
