// A service run on the host beside vkvm (CoreDNS, metrics-server, kube-proxy,
// a node's CSI driver and sidecars): its output appended to a private log
// file, dying with its owner however the owner dies (setpriv --pdeathsig),
// stopped with SIGTERM and, after 10 s, SIGKILL. It runs in a process group
// of its own, so a Ctrl-C at the owner's terminal reaches only the owner,
// which stops it in order rather than have it die (and be restarted) first.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

export interface HostService {
  pid: number | undefined;
  /** Resolves with the exit code or signal once it has exited, or with why it could not start. */
  exited: Promise<string>;
  /** Ends it; resolves once it has exited. */
  stop(): Promise<void>;
}

export function spawnHostService(argv: [string, ...string[]], logFile: string, env?: Record<string, string>): HostService {
  const out = openSync(logFile, 'a', 0o600);
  const child = spawn('setpriv', ['--pdeathsig', 'TERM', '--', ...argv], {
    stdio: ['ignore', out, out],
    detached: true,
    ...(env ? { env: { ...process.env, ...env } } : {}),
  });
  closeSync(out);
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => resolve(`${code ?? signal}`));
    child.once('error', (err) => resolve(`not started: ${err.message}`));
  });
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  return { pid: child.pid, exited, stop };
}

/** The last lines of a service's log, for an error that says why it failed. */
export async function logTail(logFile: string, lines = 5): Promise<string> {
  return (await readFile(logFile, 'utf8').catch(() => '')).trim().split('\n').slice(-lines).join('\n');
}

export type ServiceStart = { kind: 'ready' } | { kind: 'exited'; why: string; logTail: string };

/**
 * Polls `probe` until the service is ready or has exited. Past the deadline it
 * throws, naming what the probe last said and the log's end.
 */
export async function awaitServiceReady(
  svc: HostService,
  o: { what: string; logFile: string; timeoutMs: number; intervalMs: number; probe: () => Promise<{ ready: boolean; detail?: string }> },
): Promise<ServiceStart> {
  let died: string | undefined;
  void svc.exited.then((why) => (died = why));
  const deadline = Date.now() + o.timeoutMs;
  for (;;) {
    const { ready, detail } = await o.probe();
    if (ready) return { kind: 'ready' };
    if (died !== undefined) return { kind: 'exited', why: died, logTail: await logTail(o.logFile) };
    if (Date.now() > deadline)
      throw new Error(`${o.what} was not ready after ${o.timeoutMs / 1000} s${detail ? ` (${detail})` : ''}:\n${await logTail(o.logFile)}`);
    await new Promise((r) => setTimeout(r, o.intervalMs));
  }
}
