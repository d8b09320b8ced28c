// Test support: `vkvm csi` as a process of its own (as operators run it),
// and a small client of its socket for calls the tests make themselves.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createInterface } from 'node:readline';
import * as grpc from '@grpc/grpc-js';
import { packageRoot } from '../../provider/package-root.js';
import { loadCsiServices, type CsiServiceName } from '../../provider/csi/proto.js';
import { loopDevicesUnder } from './csi-leftovers.js';

const execFileP = promisify(execFile);

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

const SNW = { mode: 'SINGLE_NODE_WRITER' };
/** A block volume's capability, as the clone tests and benches ask for it. */
export const BLOCK_CAPABILITY = { block: {}, accessMode: SNW };

/**
 * A new block volume of `bytes` (a multiple of 4 MiB) holding random bytes through and through, written through its
 * loop device while staged at `staging`, then unstaged: a golden image with no hole for a sparse copy to skip.
 */
export async function createRandomBlockVolume(
  call: CsiCall,
  o: { driverDir: string; staging: string; name: string; bytes: number },
): Promise<string> {
  const made = await call('Controller', 'CreateVolume', {
    name: o.name,
    volumeCapabilities: [BLOCK_CAPABILITY],
    capacityRange: { requiredBytes: o.bytes },
  });
  const id = (made.volume as { volumeId: string }).volumeId;
  await call('Node', 'NodeStageVolume', { volumeId: id, stagingTargetPath: o.staging, volumeCapability: BLOCK_CAPABILITY });
  const loop = (await loopDevicesUnder(o.driverDir)).find((l) => l.endsWith(`/${id}.img`));
  if (!loop) throw new Error(`no loop device for the staged volume ${id}`);
  const count = String(o.bytes / (4 * 1024 * 1024));
  await execFileP('dd', ['if=/dev/urandom', `of=${loop.split(' ')[0]!}`, 'bs=4M', `count=${count}`, 'oflag=direct', 'status=none']);
  await call('Node', 'NodeUnstageVolume', { volumeId: id, stagingTargetPath: o.staging });
  return id;
}

/** An XFS filesystem with reflink on a sparse loop-backed file `<root>/xfs.img`, mounted at `<root>/xfs`; removeScratch(root) unmounts it. */
export async function mountScratchXfs(root: string, size = '8G'): Promise<string> {
  const image = join(root, 'xfs.img');
  const mnt = join(root, 'xfs');
  await execFileP('truncate', ['-s', size, image]);
  await execFileP('mkfs.xfs', ['-q', '-m', 'reflink=1', image]);
  await mkdir(mnt);
  await execFileP('mount', ['-o', 'loop', image, mnt]);
  return mnt;
}
