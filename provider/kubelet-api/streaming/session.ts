// What runs between the client's streams and the guest once a session is up:
// the serial console (attach, interactive exec) or one guest agent command
// (every other exec). See routes/exec-attach.ts for which one a request gets.
import type { Duplex, Readable } from 'node:stream';
import type { ExecResult } from '../vm-access.js';
import type { SessionLogger, StreamingConnection } from './connection.js';
import { exitStatus, internalError, statusFromError, success, type Status } from './status.js';

/**
 * A serial console has no end of command: once the client's input is over,
 * the guest may still be answering it. Output keeps flowing until the console
 * has been quiet this long, and at most CONSOLE_DRAIN_MAX_MS.
 */
export const CONSOLE_QUIET_MS = 1000;
export const CONSOLE_DRAIN_MAX_MS = 10_000;

/**
 * Joins the client to the console until the client closes stdin (then output
 * drains until the console is quiet) or the console ends (the VM stopped);
 * either way the session ends with Success. Aborting `stop` ends it at once,
 * with the abort reason as its status. The console is ended (detached), never
 * the VM. A client that disconnects takes the console attachment with it.
 */
export function serveConsole(conn: StreamingConnection, console: Duplex, log: SessionLogger, stop: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    let over = false;
    let quiet: NodeJS.Timeout | undefined;
    let drainCap: NodeJS.Timeout | undefined;
    const onStop = (): void => {
      const status = statusFromError(stop.reason);
      log.info({ reason: status.message }, 'console session stopped');
      end(status);
    };
    const disarm = (): void => {
      clearTimeout(quiet);
      clearTimeout(drainCap);
      stop.removeEventListener('abort', onStop);
    };
    const end = (status: Status): void => {
      if (over) return;
      over = true;
      disarm();
      conn.stdin?.unpipe(console);
      if (conn.stdout) console.unpipe(conn.stdout);
      console.end();
      // Let its readable side run to its end rather than sit in a buffer.
      console.resume();
      conn.finish(status).then(resolve, (err: unknown) => {
        log.debug({ err }, 'console session ended without its status');
        resolve();
      });
    };
    const restartQuiet = (): void => {
      clearTimeout(quiet);
      quiet = setTimeout(() => end(success()), CONSOLE_QUIET_MS);
    };
    const drainThenEnd = (): void => {
      conn.stdin?.unpipe(console);
      console.on('data', restartQuiet);
      restartQuiet();
      drainCap = setTimeout(() => end(success()), CONSOLE_DRAIN_MAX_MS);
    };

    if (conn.stdout) console.pipe(conn.stdout, { end: false });
    else console.resume();
    conn.resize?.resume();
    if (conn.stdin) {
      conn.stdin.pipe(console, { end: false });
      onceEnded(conn.stdin, drainThenEnd);
    }
    stop.addEventListener('abort', onStop);
    console.once('end', () => end(success()));
    console.once('error', (err) => {
      log.warn({ err }, 'serial console failed');
      end(internalError(`serial console: ${err.message}`));
    });
    void conn.closed.then(() => {
      if (!over) {
        over = true;
        disarm();
        console.destroy();
        resolve();
      }
    });
  });
}

/**
 * Runs one command through the guest agent, writes stdout and stderr and ends
 * with the exit code. With a TTY both outputs go to stdout, as on a terminal.
 */
export async function serveGuestExec(conn: StreamingConnection, run: () => Promise<ExecResult>, log: SessionLogger): Promise<void> {
  conn.resize?.resume();
  let status: Status;
  try {
    const result = await run();
    if (conn.stdout) conn.stdout.write(result.stdout);
    const errOut = conn.stderr ?? conn.stdout;
    if (errOut) errOut.write(result.stderr);
    status = exitStatus(result.exitCode);
  } catch (err) {
    status = statusFromError(err);
    if (status.code === 500) log.error({ err }, 'guest exec failed');
    else log.debug({ err }, 'guest exec refused');
  }
  await conn.finish(status);
}

/** Calls `done` once when `input` ends or is torn down (without 'end', as on a SPDY reset). */
function onceEnded(input: Readable, done: () => void): void {
  let called = false;
  const once = () => {
    if (!called) {
      called = true;
      done();
    }
  };
  input.once('end', once);
  input.once('close', once);
}
