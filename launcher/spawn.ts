// Starting a launcher from the node agent. The launcher gets its own session
// (detached) and writes its log to a file, not to a pipe, so it survives the
// agent exiting, unless asked to die with it. It is ready when its gRPC socket
// accepts connections.
import { spawn } from 'node:child_process';
import { closeSync, openSync, statSync } from 'node:fs';
import { mkdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launcherArgv, type LauncherArgs } from './args.js';
import { LauncherClient } from './client.js';
import type { ExitInfo } from './libvirtd.js';
import { isLauncherAlive, readStateFile, STATE_FILE_NAME } from './state.js';
import { waitForUnixSocket } from './wait.js';

export interface SpawnOptions {
  args: Pick<LauncherArgs, 'uid' | 'runDir'> & Partial<LauncherArgs>;
  /** Node options before the entry script; tests pass a TypeScript loader. */
  nodeArgs?: string[];
  /** The launcher's entry script; default `launcherEntry()`. */
  entry?: string;
  /** Default <runDir>/launcher.log. */
  logFile?: string;
  timeoutMs?: number;
  /**
   * SIGTERM the launcher (which stops its VM) when this process dies, even by
   * SIGKILL: for `vkvm up`, whose cluster and network go away with it.
   */
  dieWithParent?: boolean;
}

export interface SpawnedLauncher {
  pid: number;
  client: LauncherClient;
  logFile: string;
  /** Settles when the launcher exits, as long as this process lives (it is the parent). */
  exited: Promise<ExitInfo>;
}

/**
 * The build's one-file bundle of the launcher, through its code-cache entry
 * (deploy/bundle-launcher.ts: about 100 ms less CPU per start than loading
 * its modules one by one, and less again cached), or main.js beside this
 * module when there is no bundle or it is older than main.js (compiled again
 * since it was made).
 */
export function launcherEntry(dir = path.dirname(fileURLToPath(import.meta.url))): string {
  const main = path.join(dir, 'main.js');
  const bundle = path.join(dir, 'bundle', 'start.cjs');
  const mtime = (f: string): number => {
    try {
      return statSync(f).mtimeMs;
    } catch {
      return Number.NaN;
    }
  };
  return mtime(bundle) >= mtime(main) ? bundle : main;
}

/**
 * A launcher that exited before it served. Its message is one sentence, for a pod event and status (as the
 * kubelet's); the log's tail rides along for the agent's own log, and the log file keeps the rest.
 */
export class LauncherStartError extends Error {
  readonly logFile: string;
  readonly launcherLog: string;
  constructor(message: string, o: { logFile: string; launcherLog: string }) {
    super(message);
    this.name = 'LauncherStartError';
    this.logFile = o.logFile;
    this.launcherLog = o.launcherLog;
  }
}

/**
 * The first line of the last error the launcher logged (pino JSON lines, level error or fatal), else of the
 * error Node printed when one was thrown before the launcher's logger ran ("Error: ..." on its own line).
 */
export function startFailureCause(log: string): string | undefined {
  const lines = log.trimEnd().split('\n');
  for (const line of [...lines].reverse()) {
    let entry: { level?: unknown; msg?: unknown; err?: { message?: unknown } };
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      continue;
    }
    if (typeof entry.level !== 'number' || entry.level < 50) continue;
    const text = typeof entry.err?.message === 'string' ? entry.err.message : typeof entry.msg === 'string' ? entry.msg : undefined;
    const first = text?.split('\n')[0]?.trim();
    if (first) return first;
  }
  return lines.map((l) => /^[A-Za-z]*Error: (.+)$/.exec(l)?.[1]).findLast((m) => m !== undefined);
}

export async function spawnLauncher(o: SpawnOptions): Promise<SpawnedLauncher> {
  const runDir = path.resolve(o.args.runDir);
  const socket = o.args.socket ?? path.join(runDir, 'launcher.sock');
  const logFile = o.logFile ?? path.join(runDir, 'launcher.log');
  const entry = o.entry ?? launcherEntry();
  await mkdir(runDir, { recursive: true, mode: 0o711 });
  const stateFile = path.join(runDir, STATE_FILE_NAME);
  const previous = await readStateFile(stateFile).catch(() => undefined);
  // One launcher per VM: a second one would boot the same disks.
  if (previous && (await isLauncherAlive(previous))) throw new Error(`launcher pid ${previous.pid} still runs for ${previous.uid}`);
  // A state file of an earlier launcher would make connect() read its socket.
  await rm(stateFile, { force: true });
  const out = openSync(logFile, 'a', 0o600);
  let child;
  try {
    const argv = [process.execPath, ...(o.nodeArgs ?? []), entry, ...launcherArgv({ ...o.args, runDir, socket })];
    // setpriv sets PR_SET_PDEATHSIG and execs in place: the pid stays the launcher's.
    const [file, ...args] = o.dieWithParent ? ['setpriv', '--pdeathsig', 'TERM', '--', ...argv] : argv;
    child = spawn(file!, args, { detached: true, stdio: ['ignore', out, out] });
  } finally {
    closeSync(out);
  }
  child.unref();
  const exited = new Promise<ExitInfo>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const diedEarly = exited.then(async (e): Promise<never> => {
    const log = await readFile(logFile, 'utf8').catch(() => '');
    throw new LauncherStartError(startFailureCause(log) ?? `launcher exited during start-up (code ${e.code}, signal ${e.signal})`, {
      logFile,
      launcherLog: log.slice(-4000),
    });
  });
  try {
    // The launcher writes its state file before it binds: an accepting socket means both are there.
    await waitForUnixSocket(socket, o.timeoutMs ?? 60_000, diedEarly);
    return { pid: child.pid!, client: await LauncherClient.connect(runDir), logFile, exited };
  } catch (err) {
    // Never leave a launcher behind that nobody tracks; SIGKILL takes its QEMU with it.
    diedEarly.catch(() => {});
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    throw err;
  }
}
