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

export interface VirtctlRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs virtctl to completion (a minute at most) and returns its exit code and output, whatever the code. */
export async function runVirtctl(bin: string, args: string[]): Promise<VirtctlRun> {
  try {
    const { stdout, stderr } = await execFileP(bin, args, { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/** A running `virtctl console`: its output so far, typing into it, and its end. */
export interface ConsoleSession {
  /** Resolves once virtctl says it is connected. */
  connected: Promise<void>;
  /** Everything the console printed so far. */
  output(): string;
  /** Types `line` and a newline; resolves with the output after it once `expect` appears in it. */
  run(line: string, expect: string, timeoutMs?: number): Promise<string>;
  /**
   * `run`, typed again every few seconds until `expect` appears: for the first
   * line of a session whose guest may still be booting, when what is typed
   * before the shell reads its terminal is lost or arrives cut.
   */
  runOnceReady(line: string, expect: string, timeoutMs?: number): Promise<string>;
  /** Resolves once `expect` appears in the output printed from now on. */
  waitFor(expect: string, timeoutMs?: number): Promise<string>;
  /** Ctrl-], virtctl's escape sequence. */
  detach(): void;
  exited: Promise<{ code: number | null; stderr: string }>;
  kill(): void;
}

export function openConsole(bin: string, args: string[]): ConsoleSession {
  const child = spawn(bin, [...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const waiters: Array<() => void> = [];
  const poke = () => waiters.splice(0).forEach((w) => w());
  child.stdout.on('data', (d: Buffer) => ((stdout += d.toString()), poke()));
  child.stderr.on('data', (d: Buffer) => ((stderr += d.toString()), poke()));
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.on('exit', (code) => (poke(), resolve({ code, stderr }))),
  );
  const until = (what: string, ok: () => boolean, timeoutMs = 60_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new Error(`console: no ${what} within ${timeoutMs} ms; output: ${JSON.stringify(stdout.slice(-800))}; stderr: ${stderr}`)),
        timeoutMs,
      );
      const check = () => {
        if (ok()) {
          clearTimeout(timer);
          resolve();
        } else if (child.exitCode !== null) {
          clearTimeout(timer);
          reject(new Error(`console exited (${child.exitCode}) before ${what}: ${stderr}`));
        } else waiters.push(check);
      };
      check();
    });
  const waitFor = async (expect: string, timeoutMs?: number) => {
    const from = stdout.length;
    await until(JSON.stringify(expect), () => stdout.slice(from).includes(expect), timeoutMs);
    return stdout.slice(from);
  };
  return {
    connected: until('connection', () => stderr.includes('Successfully connected')),
    output: () => stdout,
    async run(line, expect, timeoutMs) {
      const from = stdout.length;
      child.stdin.write(`${line}\n`);
      await until(JSON.stringify(expect), () => stdout.slice(from).includes(expect), timeoutMs);
      return stdout.slice(from);
    },
    async runOnceReady(line, expect, timeoutMs = 60_000) {
      const from = stdout.length;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        child.stdin.write(`${line}\n`);
        const left = deadline - Date.now();
        try {
          await until(JSON.stringify(expect), () => stdout.slice(from).includes(expect), Math.max(1, Math.min(5000, left)));
          return stdout.slice(from);
        } catch (err) {
          if (Date.now() >= deadline || child.exitCode !== null) throw err;
        }
      }
    },
    waitFor,
    detach: () => child.stdin.write('\x1d'),
    exited,
    kill: () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}
