// Reads a running Node process's own view of its memory through the
// inspector, without changing how it was started: SIGUSR1 opens the inspector
// on 127.0.0.1:9229, then process.memoryUsage() and V8's heap spaces are read
// over the DevTools protocol, before and after a full GC. Opening the inspector
// costs the target some memory, so measure PSS first. One process at a time
// (fixed port); the inspector is closed again afterwards.
import WebSocket from 'ws';
import { withDeadline } from '../../launcher/wait.js';
import { until } from './bench.js';

const PORT = 9229;

export interface NodeMemory {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  /** V8 heap spaces: name → bytes used. */
  spaces: Record<string, number>;
}

const EXPRESSION = `(() => {
  const v8 = process.getBuiltinModule('node:v8');
  const spaces = {};
  for (const s of v8.getHeapSpaceStatistics()) spaces[s.space_name] = s.space_used_size;
  return JSON.stringify({ ...process.memoryUsage(), spaces });
})()`;

async function debuggerUrl(): Promise<string | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${PORT}/json/list`);
    const list = (await res.json()) as { webSocketDebuggerUrl?: string }[];
    return list[0]?.webSocketDebuggerUrl;
  } catch {
    return undefined;
  }
}

export async function inspectNodeMemory(pid: number, signal: AbortSignal): Promise<{ beforeGc: NodeMemory; afterGc: NodeMemory }> {
  if (await debuggerUrl()) throw new Error(`something already listens on the inspector port ${PORT}`);
  process.kill(pid, 'SIGUSR1');
  let url: string | undefined;
  await until(`the inspector of ${pid} listens on ${PORT}`, async () => (url = await debuggerUrl()) !== undefined, 10_000, signal);
  const ws = new WebSocket(url!);
  await new Promise<void>((resolve, reject) => ws.once('open', resolve).once('error', reject));
  let nextId = 1;
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  ws.on('message', (data) => {
    const msg = JSON.parse(data.toString()) as { id?: number; result?: unknown; error?: { message: string } };
    const p = msg.id === undefined ? undefined : pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id!);
    if (msg.error) p.reject(new Error(msg.error.message));
    else p.resolve(msg.result);
  });
  const call = (method: string, params: object = {}): Promise<unknown> => {
    const id = nextId++;
    const reply = new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
    ws.send(JSON.stringify({ id, method, params }));
    return withDeadline(reply, 30_000, `inspector ${method} on ${pid}`);
  };
  const read = async (): Promise<NodeMemory> => {
    const r = (await call('Runtime.evaluate', { expression: EXPRESSION, returnByValue: true })) as {
      result: { value?: string };
      exceptionDetails?: { text: string };
    };
    if (r.exceptionDetails || typeof r.result.value !== 'string') throw new Error(`evaluating in ${pid}: ${JSON.stringify(r)}`);
    return JSON.parse(r.result.value) as NodeMemory;
  };
  try {
    const beforeGc = await read();
    await call('HeapProfiler.collectGarbage');
    const afterGc = await read();
    // Fire and forget: the session this goes over closes with the inspector, so no reply may come.
    void call('Runtime.evaluate', { expression: `process.getBuiltinModule('node:inspector').close()` }).catch(() => {});
    return { beforeGc, afterGc };
  } finally {
    ws.close();
  }
}
