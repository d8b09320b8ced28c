// Client programs the e2e tests run as a user would: kubectl (the control
// plane's own) under a given kubeconfig, a long-running port-forward, ssh with
// a throw-away key, and HTTP GETs through a forwarded port.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import type { TestCluster } from './cluster.js';

export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a program to its end; its exit code and output, whatever the code. */
export function runCommand(program: string, args: string[], env?: NodeJS.ProcessEnv): Promise<CommandResult> {
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(env ? { env: { ...process.env, ...env } } : {}) });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stdout, stderr })));
}

/** kubectl in `namespace` as the user of `kubeconfig`. */
export const kubectlAs = (cluster: TestCluster, kubeconfig: string, namespace: string, args: string[]): Promise<CommandResult> =>
  runCommand(cluster.binary, ['kubectl', `--kubeconfig=${kubeconfig}`, '-n', namespace, ...args]);

export interface Forwarding {
  localPort: number;
  /** The forwarder's stderr so far. */
  stderr: () => string;
}

/**
 * Starts a port forwarder that prints the local port it listens on, and
 * resolves with that port (read from its output by `localPortOf`); it runs
 * until the test ends.
 */
export async function startForwarder(
  t: Test,
  program: string,
  args: string[],
  localPortOf: (line: string) => number | undefined,
  env?: NodeJS.ProcessEnv,
): Promise<Forwarding> {
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(env ? { env: { ...process.env, ...env } } : {}) });
  t.teardown(() => void child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const localPort = await new Promise<number>((resolve, reject) => {
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on('line', (line) => {
        const port = localPortOf(line);
        if (port !== undefined) resolve(port);
      });
    }
    child.once('exit', (code) => reject(new Error(`${program} ${args.join(' ')} exited (${code}): ${stderr}`)));
  });
  return { localPort, stderr: () => stderr };
}

/** `kubectl port-forward pod/<pod> :<port>` as the user of `kubeconfig`, until the test ends. */
export const kubectlPortForward = (t: Test, cluster: TestCluster, kubeconfig: string, namespace: string, pod: string, port: number) =>
  startForwarder(
    t,
    cluster.binary,
    ['kubectl', `--kubeconfig=${kubeconfig}`, '-n', namespace, 'port-forward', `pod/${pod}`, `:${port}`],
    (line) => {
      const m = /^Forwarding from 127\.0\.0\.1:(\d+) -> \d+$/.exec(line);
      return m ? Number(m[1]) : undefined;
    },
  );

/** A new ed25519 key pair, removed with the test: its private key's path and its public key. */
export async function sshKey(t: Test): Promise<{ path: string; publicKey: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-ssh-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'id');
  const made = await runCommand('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path]);
  if (made.code !== 0) throw new Error(`ssh-keygen failed: ${made.stderr}`);
  return { path, publicKey: (await readFile(`${path}.pub`, 'utf8')).trim() };
}

/** ssh options for a throw-away identity: no prompts, no known_hosts (the test guest makes new host keys each boot). */
export const SSH_OPTIONS = [
  'IdentitiesOnly=yes',
  'BatchMode=yes',
  'StrictHostKeyChecking=no',
  'UserKnownHostsFile=/dev/null',
  'ConnectTimeout=20',
  'LogLevel=ERROR',
];

/** The shell command that puts `publicKey` in root's authorized keys in the test guest. */
export const authorizeKey = (publicKey: string): string => `mkdir -p /root/.ssh && echo '${publicKey}' >/root/.ssh/authorized_keys`;

/** GET / through a local port; the body, trimmed. */
export async function httpGet(localPort: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${localPort}/`, { signal: AbortSignal.timeout(20_000) });
  return (await res.text()).trim();
}
