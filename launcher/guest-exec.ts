// guest-exec through the QEMU guest agent: start the command, then ask
// guest-exec-status until it has exited. The agent protocol has no completion
// notification, so asking again (with backoff) is the only way to learn it.
import { TimeoutError } from './errors.js';

export interface GuestExecRequest {
  path: string;
  args: string[];
  stdin: Buffer;
  timeoutS: number;
}

export interface GuestExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

/** Sends one agent command and returns its "return" member. */
export type AgentCall = (command: { execute: string; arguments?: unknown }, timeoutS: number) => Promise<unknown>;

interface ExecStatus {
  exited: boolean;
  exitcode?: number;
  signal?: number;
  'out-data'?: string;
  'err-data'?: string;
  'out-truncated'?: boolean;
  'err-truncated'?: boolean;
}

/** Each agent round trip may take this long before the agent counts as unresponsive. */
const AGENT_CALL_TIMEOUT_S = 10;

export async function guestExec(call: AgentCall, req: GuestExecRequest): Promise<GuestExecResult> {
  const deadline = Date.now() + req.timeoutS * 1000;
  const started = (await call(
    {
      execute: 'guest-exec',
      arguments: {
        path: req.path,
        arg: req.args,
        'capture-output': true,
        ...(req.stdin.length > 0 ? { 'input-data': req.stdin.toString('base64') } : {}),
      },
    },
    AGENT_CALL_TIMEOUT_S,
  )) as { pid: number };
  for (let delayMs = 10; ; delayMs = Math.min(delayMs * 2, 500)) {
    const status = (await call({ execute: 'guest-exec-status', arguments: { pid: started.pid } }, AGENT_CALL_TIMEOUT_S)) as ExecStatus;
    if (status.exited) {
      return {
        // A command killed by a signal reports no exit code; use the shell's 128+signal convention.
        exitCode: status.exitcode ?? 128 + (status.signal ?? 0),
        stdout: Buffer.from(status['out-data'] ?? '', 'base64'),
        stderr: Buffer.from(status['err-data'] ?? '', 'base64'),
        stdoutTruncated: status['out-truncated'] ?? false,
        stderrTruncated: status['err-truncated'] ?? false,
      };
    }
    if (Date.now() + delayMs > deadline) {
      throw new TimeoutError(`guest command ${req.path} (guest pid ${started.pid}) still running after ${req.timeoutS} s`);
    }
    await new Promise((r) => setTimeout(r, delayMs));
  }
}
