// `vkvm up` from the built CLI as a bench's cluster: the control plane, the
// node agents, the KubeVirt controllers and, on every vkvm node, the CSI
// driver with its default StorageClass, as an operator gets them. Its removal
// (SIGINT to its process group, as a terminal's Ctrl-C, then the state dir)
// is registered with the bench context before it starts.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../deploy/cluster/cluster.js';
import { packageRoot } from '../../provider/package-root.js';
import { removeScratch } from '../helpers/csi-leftovers.js';
import { until, type BenchContext } from './bench.js';
import { pidsWhere } from './proc.js';

const UP_TIMEOUT_MS = 600_000;

export interface BenchUp {
  stateDir: string;
  /** The admin kubeconfig vkvm up wrote. */
  kubeconfigPath: string;
}

/** Starts `vkvm up --nodes N` on a fresh state dir and resolves once it printed that its nodes are up. */
export async function startVkvmUp(ctx: BenchContext, o: { nodes: number; nodeName: string; prefix: string }): Promise<BenchUp> {
  const stateDir = await mkdtemp(join(tmpdir(), o.prefix));
  // mkdtemp makes it 0700; QEMU (unprivileged) must reach the VM disks below it.
  await chmod(stateDir, 0o711);
  ctx.defer('the state dir and what still names it', async () => {
    for (const pid of pidsWhere((argv) => argv.some((a) => a.includes(stateDir)))) process.kill(pid, 'SIGKILL');
    // A volume still staged when vkvm up stopped keeps its mount and loop device (as a kubelet's stays over a restart).
    await removeScratch(stateDir);
  });
  const args = [
    'up',
    `--state-dir=${stateDir}`,
    `--nodes=${o.nodes}`,
    `--node-name=${o.nodeName}`,
    '--subresources-port=0',
    '--healthz-port=0',
    // Its own bridge: another vkvm up on this host (a test's, an operator's) keeps its own.
    `--bridge=vkb${randomBytes(4).toString('hex')}`,
  ];
  const child = spawn(process.execPath, [join(packageRoot(), 'dist/provider/cli/main.js'), ...args, `--kubelet-port=${await freePort()}`], {
    stdio: ['ignore', 'pipe', 'ignore'],
    detached: true,
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  ctx.defer('vkvm up', async () => {
    if (child.exitCode === null) process.kill(-child.pid!, 'SIGINT');
    await exited;
  });
  await until(
    `vkvm up --nodes ${o.nodes} is up`,
    () => /\nvkvm: nodes? .* up\./.test(output) || child.exitCode !== null,
    UP_TIMEOUT_MS,
    ctx.signal,
  );
  if (child.exitCode !== null) throw new Error(`vkvm up exited ${child.exitCode}`);
  return { stateDir, kubeconfigPath: join(stateDir, 'kubeconfig') };
}
