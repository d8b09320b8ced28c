// Test support: `vkvm csi` as a process of its own (as operators run it),
// and a small client of its socket for calls the tests make themselves.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import * as grpc from '@grpc/grpc-js';
import { packageRoot } from '../../provider/package-root.js';
import { loadCsiServices, type CsiServiceName } from '../../provider/csi/proto.js';

const CLI = join(packageRoot(), 'dist', 'provider', 'cli', 'main.js');

export interface DriverProcess {
  pid: number;
  socket: string;
  /** SIGTERM, then waits for the exit; its exit code. */
  stop(): Promise<number | null>;
  /** What it logged, for failure messages. */
  output(): string;
}

/** Starts `vkvm csi` and resolves once it serves (its "CSI driver serving" line). */
export async function startDriverProcess(o: { dir: string; socket: string; nodeId: string; extraArgs?: string[] }): Promise<DriverProcess> {
  const args = [CLI, 'csi', `--csi-dir=${o.dir}`, `--socket=${o.socket}`, `--node-id=${o.nodeId}`, ...(o.extraArgs ?? [])];
  // Dies with the test (setpriv --pdeathsig): a driver nobody stops would hold loop devices.
  const child: ChildProcess = spawn('setpriv', ['--pdeathsig', 'TERM', '--', process.execPath, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output += `${line}\n`;
      if (line.includes('CSI driver serving')) resolve();
    });
    void exited.then((code) => reject(new Error(`vkvm csi exited (${code}) before serving:\n${output}`)));
  });
  return {
    pid: child.pid!,
    socket: o.socket,
    output: () => output,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

export type CsiCall = (service: CsiServiceName, method: string, request: object) => Promise<Record<string, unknown>>;

/** Unary calls on the driver's socket; a refusal rejects with the gRPC error (its `code` is the status). */
export function csiClient(socket: string): { call: CsiCall; close(): void } {
  const services = loadCsiServices();
  const clients = Object.fromEntries(
    (Object.keys(services) as CsiServiceName[]).map((name) => [
      name,
      new services[name](`unix://${socket}`, grpc.credentials.createInsecure()),
    ]),
  ) as unknown as Record<CsiServiceName, grpc.Client>;
  const call: CsiCall = (service, method, request) =>
    new Promise((resolve, reject) => {
      const client = clients[service] as unknown as Record<
        string,
        (req: object, cb: (err: Error | null, res: Record<string, unknown>) => void) => void
      >;
      const fn = client[method];
      if (!fn) return reject(new Error(`${service} has no method ${method}`));
      fn.call(client, request, (err, res) => (err ? reject(err) : resolve(res)));
    });
  return { call, close: () => Object.values(clients).forEach((c) => c.close()) };
}
