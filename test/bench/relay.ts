// The migration relay's own cost, without VMs: how fast bytes cross a relayed
// stream (source unix listener → TLS 1.3 over loopback TCP → target unix
// socket, provider/migration/) against the same bytes written straight into a
// unix socket between the same two processes, in the same run; and how long a new stream takes to open
// (connect, mutual TLS handshake, header, authorization, reply), which each
// libvirt, memory and NBD connection of a migration pays once.
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { RelayClient, type RelayTarget } from '../../provider/migration/relay-client.js';
import { newCa } from '../helpers/fake-ca.js';
import { nodeClientPair, nodeServingPair } from '../helpers/relay-certs.js';
import { abortable, type BenchContext, type Benchmark } from './bench.js';
import type { Init, TargetMessage } from './relay-target.js';
import { BYTES_PER_MiB, percentile } from './stats.js';

/** A 128 MiB guest's memory, twice over: pre-copy sends some pages again. */
const BYTES_PER_RUN = 256 * BYTES_PER_MiB;
const RUNS = 5;
const STREAM_OPENS = 20;
const UID = '00000000-0000-4000-8000-000000000001';

/** The target process's next message that matches. */
function message<T extends TargetMessage>(child: ChildProcess, match: (m: TargetMessage) => m is T): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: TargetMessage): void => {
      if (!match(m)) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(m);
    };
    const onExit = (code: number | null): void => reject(new Error(`the relay target process exited (${code})`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/** MiB/s of BYTES_PER_RUN written into `path` until the target process says its sink `name` has them all. */
async function throughput(child: ChildProcess, path: string, name: 'relayed' | 'direct'): Promise<number> {
  const chunk = randomBytes(BYTES_PER_MiB);
  const socket = connect(path);
  socket.on('error', () => {});
  await once(socket, 'connect');
  const done = message(child, (m): m is { received: typeof name } => 'received' in m && m.received === name);
  const t0 = performance.now();
  for (let sent = 0; sent < BYTES_PER_RUN; sent += chunk.length) if (!socket.write(chunk)) await once(socket, 'drain');
  await done;
  const ms = performance.now() - t0;
  socket.destroy();
  return BYTES_PER_RUN / BYTES_PER_MiB / (ms / 1000);
}

async function relayThroughput(ctx: BenchContext): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-bench-relay-'));
  ctx.defer('the scratch dir', () => rm(dir, { recursive: true, force: true }));
  const vmDir = join(dir, 'vm');
  await mkdir(join(vmDir, 'libvirt', 'run', 'm'), { recursive: true });
  const ca = await newCa();
  // The target side in its own process, as on its own node: each side does its half of the TLS work.
  const child = fork(fileURLToPath(new URL('./relay-target.js', import.meta.url)), { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  ctx.defer('the relay target process', async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    await exited;
  });
  const init: Init = {
    uid: UID,
    vmDir,
    directPath: join(dir, 'direct'),
    serving: await nodeServingPair(ca, 'b'),
    bytesPerRun: BYTES_PER_RUN,
  };
  const ready = message(child, (m): m is { port: number } => 'port' in m);
  child.send(init);
  const { port } = await abortable(ready, ctx.signal);
  const clientPair = await nodeClientPair(ca, 'a');
  const client = new RelayClient({ credentials: () => clientPair, log: pino({ level: 'silent' }) });
  ctx.defer('the relay client', () => client.close());
  const target: RelayTarget = { uid: UID, node: 'b', address: '127.0.0.1', port };

  const opens: number[] = [];
  for (let i = 0; i < STREAM_OPENS; i++) {
    const t0 = performance.now();
    const control = await abortable(client.dial(target, 'control', i), ctx.signal);
    opens.push(performance.now() - t0);
    control.destroy();
  }
  const sourcePath = join(dir, 'mem');
  await client.listen(target, 'memory', sourcePath);

  const relayed: number[] = [];
  const plain: number[] = [];
  // Alternated, so a busy moment on the shared box weighs on both alike.
  for (let i = 0; i < RUNS; i++) {
    relayed.push(await abortable(throughput(child, sourcePath, 'relayed'), ctx.signal));
    plain.push(await abortable(throughput(child, init.directPath, 'direct'), ctx.signal));
  }
  ctx.log(`relayed ${relayed.map(Math.round).join(', ')} MiB/s; plain unix ${plain.map(Math.round).join(', ')} MiB/s`);
  ctx.emit('relay_throughput_mib_s', percentile(relayed, 50), 'MiB/s');
  ctx.emit('relay_unix_pipe_throughput_mib_s', percentile(plain, 50), 'MiB/s');
  ctx.emit('relay_vs_unix_pipe_ratio', percentile(relayed, 50) / percentile(plain, 50), 'ratio');
  ctx.emit('relay_128mib_ms', (128 / percentile(relayed, 50)) * 1000, 'ms');
  ctx.emit('relay_stream_open_ms_p50', percentile(opens, 50), 'ms');
  ctx.emit('relay_stream_open_ms_p95', percentile(opens, 95), 'ms');
}

export const RELAY_BENCHMARKS: readonly Benchmark[] = [
  {
    name: 'relay.throughput',
    description: `migration relay on loopback: MiB/s of ${BYTES_PER_RUN / BYTES_PER_MiB} MiB (${RUNS} runs) against a plain unix socket, and stream open time`,
    run: relayThroughput,
  },
];
