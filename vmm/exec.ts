// Runs host programs without a shell: arguments (paths, URLs) are passed as an
// argv array, so nothing in a spec can be interpreted as shell syntax.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CommandError } from './errors.js';

const execFileAsync = promisify(execFile);

/** Runs `file` with `args` and returns its stdout; any failure becomes a CommandError carrying stderr. */
export async function run(file: string, args: readonly string[], timeoutMs = 120_000): Promise<string> {
  try {
    const { stdout } = await execFileAsync(file, args, { encoding: 'utf8', timeout: timeoutMs, maxBuffer: 16 << 20 });
    return stdout;
  } catch (err) {
    const e = err as { code?: unknown; stderr?: unknown; message: string };
    const stderr = typeof e.stderr === 'string' && e.stderr ? e.stderr : e.message;
    throw new CommandError([file, ...args], typeof e.code === 'number' ? e.code : null, stderr, { cause: err });
  }
}
