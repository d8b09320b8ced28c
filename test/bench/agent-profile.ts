// A CPU profile of the node agent over one window of a benchmark (#29: where
// the agent's CPU per VM start goes). With BENCH_AGENT_CPU_PROFILE=<file> the
// agent is started with its inspector on a loopback port, and the window's
// profile, from V8's sampling profiler through the DevTools protocol, is
// written to the file (.cpuprofile: Chrome DevTools or speedscope read it).
// Only the window is profiled: --cpu-prof would cover the agent's start-up
// and needs a clean exit, which a benchmark's SIGKILL removal never gives.
import { writeFile } from 'node:fs/promises';
import WebSocket from 'ws';

/** Where the profile goes; undefined when none was asked for. */
export const AGENT_PROFILE_FILE = process.env.BENCH_AGENT_CPU_PROFILE || undefined;

/** The agent's extra Node arguments: its inspector, on a free loopback port, when a profile is asked for. */
export const agentProfileNodeArgs = (): string[] => (AGENT_PROFILE_FILE ? ['--inspect=127.0.0.1:0'] : []);

/** The inspector's address from the agent's stderr line, as Node prints it. */
export function inspectorUrl(line: string): string | undefined {
  return /Debugger listening on (ws:\/\/\S+)/.exec(line)?.[1];
}

/** A DevTools-protocol session: one request at a time, answered by id. */
async function session(url: string): Promise<{ call(method: string, params?: object): Promise<unknown>; close(): void }> {
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  let nextId = 1;
  const pending = new Map<number, (msg: { result?: unknown; error?: { message: string } }) => void>();
  ws.on('message', (data: Buffer) => {
    const msg = JSON.parse(data.toString()) as { id?: number; result?: unknown; error?: { message: string } };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg);
  });
  return {
    call: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const id = nextId++;
        pending.set(id, (msg) => (msg.error ? reject(new Error(`${method}: ${msg.error.message}`)) : resolve(msg.result)));
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

/**
 * Starts the agent's profiler (sampling every 200 µs); the returned function
 * stops it and writes the profile. A no-op pair when no profile was asked for.
 */
export async function startAgentProfile(inspector: string | undefined): Promise<() => Promise<string | undefined>> {
  if (!AGENT_PROFILE_FILE) return async () => undefined;
  if (!inspector) throw new Error('BENCH_AGENT_CPU_PROFILE is set but the agent printed no inspector address');
  const s = await session(inspector);
  await s.call('Profiler.enable');
  await s.call('Profiler.setSamplingInterval', { interval: 200 });
  await s.call('Profiler.start');
  return async () => {
    const { profile } = (await s.call('Profiler.stop')) as { profile: unknown };
    s.close();
    await writeFile(AGENT_PROFILE_FILE, JSON.stringify(profile));
    return AGENT_PROFILE_FILE;
  };
}
