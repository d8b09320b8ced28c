// What runs between the client's streams and the guest once a session is up:
// the serial console (attach, interactive exec) or one guest agent command
// (every other exec). See routes/exec-attach.ts for which one a request gets.
import type { Duplex, Readable } from 'node:stream';
import type { ExecResult } from '../vm-access.js';
import type { SessionLogger, StreamingConnection } from './connection.js';
import { exitStatus, internalError, statusFromError, StdinTooLargeError, success, type Status } from './status.js';

/**
 * Exec input travels base64-encoded inside one guest agent request; keep it
 * well below what libvirt and the agent accept in one message.
 */
export const MAX_EXEC_STDIN_BYTES = 1024 * 1024;

/**
 * Joins the client to the console until the client closes stdin (detach) or
 * the console ends (the VM stopped); either way the session ends with
 * Success. The console is ended (detached), never the VM. A client that
 * disconnects takes the console attachment with it.
 */
export function serveConsole(conn: StreamingConnection, serial: Duplex, log: SessionLogger): Promise<void> {
  return new Promise((resolve) => {
    let over = false;
    const end = (status: Status): void => {
      if (over) return;
      over = true;
      conn.stdin?.unpipe(serial);
      if (conn.stdout) serial.unpipe(conn.stdout);
      serial.end();
      // Let its readable side run to its end rather than sit in a buffer.
      serial.resume();
      conn.finish(status).then(resolve, (err: unknown) => {
        log.debug({ err }, 'console session ended without its status');
        resolve();
      });
    };

    if (conn.stdout) serial.pipe(conn.stdout, { end: false });
    else serial.resume();
    conn.resize?.resume();
    if (conn.stdin) {
      conn.stdin.pipe(serial, { end: false });
      onceEnded(conn.stdin, () => end(success()));
    }
    serial.once('end', () => end(success()));
    serial.once('error', (err) => {
      log.warn({ err }, 'serial console failed');
      end(internalError(`serial console: ${err.message}`));
    });
    void conn.closed.then(() => {
      if (!over) {
        over = true;
        serial.destroy();
        resolve();
      }
    });
  });
}

/**
 * Runs one command through the guest agent: reads stdin to its end (the
 * agent takes input only up front), runs, writes stdout and stderr and ends
 * with the exit code. With a TTY both outputs go to stdout, as on a terminal.
 */
export async function serveGuestExec(conn: StreamingConnection, run: (stdin: Buffer) => Promise<ExecResult>, log: SessionLogger): Promise<void> {
  conn.resize?.resume();
  let status: Status;
  try {
    const stdin = conn.stdin ? await readInput(conn.stdin, MAX_EXEC_STDIN_BYTES) : Buffer.alloc(0);
    // The client left before its input was complete: there is nothing to run.
    if (stdin === undefined) return;
    const result = await run(stdin);
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

/** All of `input`; undefined if it is torn down before its end. */
function readInput(input: Readable, maxBytes: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    input.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        reject(new StdinTooLargeError(`exec through the guest agent takes at most ${maxBytes} bytes of stdin`));
        input.destroy();
      } else chunks.push(chunk);
    });
    input.once('end', () => resolve(Buffer.concat(chunks)));
    // After 'end' this changes nothing.
    input.once('close', () => resolve(undefined));
  });
}
