// A service `vkvm up` runs on the host beside the control plane (CoreDNS,
// metrics-server): its output appended to a private log file, dying with
// vkvm up however vkvm up dies (setpriv --pdeathsig), stopped with SIGTERM
// and, after 10 s, SIGKILL.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';

export interface HostService {
  pid: number | undefined;
  /** Resolves with the exit code or signal once it has exited. */
  exited: Promise<string>;
  /** Ends it; resolves once it has exited. */
  stop(): Promise<void>;
}

export function spawnHostService(argv: [string, ...string[]], logFile: string): HostService {
  const out = openSync(logFile, 'a', 0o600);
  const child = spawn('setpriv', ['--pdeathsig', 'TERM', '--', ...argv], { stdio: ['ignore', out, out] });
  closeSync(out);
  const exited = new Promise<string>((resolve) => child.once('exit', (code, signal) => resolve(`${code ?? signal}`)));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  return { pid: child.pid, exited, stop };
}
