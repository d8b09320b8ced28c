// virtctl against a real control plane: the subresource API and the
// controllers in this process (as `vkvm up` runs them), one node agent, the
// KubeVirt smoke VM. console_attach_ms is KubeVirt's own `virtctl console`
// started → the first byte of a typed command's echo on its stdout: the
// aggregator, the subresource API's checks, the node's authorization, the
// splice and the launcher's console, end to end. The guest's shell is up
// before the first sample; each session displaces the one before.
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { defaultRouteAddress } from '../../provider/node/default-address.js';
import { startSubresourceApi } from '../../provider/subresources/start.js';
import { condition, poll, waitFor } from '../e2e/framework/wait.js';
import { virtualMachineInstances } from '../e2e/framework/watched.js';
import { smokeVm } from '../e2e/framework/kubevirt.js';
import { ensureVirtctl, openConsole } from '../helpers/virtctl.js';
import { abortable, type BenchContext, type Benchmark } from './bench.js';
import { startBenchNode } from './cluster-node.js';
import { percentile } from './stats.js';

const NODE = 'vkvm-bench-virtctl';
const NAMESPACE = 'bench-virtctl';
const SAMPLES = 7;
const BOOT_TIMEOUT_MS = 300_000;
const log = pino({ level: 'warn' }, pino.destination(2));

/** One `virtctl console`: spawned → first stdout byte after a command is typed (as soon as it says it is connected). */
function attachOnce(bin: string, kubeconfig: string, marker: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(bin, [`--kubeconfig=${kubeconfig}`, `--namespace=${NAMESPACE}`, 'console', 'testvm'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    let typed = false;
    let echoMs: number | undefined;
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (!typed && stderr.includes('Successfully connected')) {
        typed = true;
        child.stdin.write(`echo ${marker}\n`);
      }
    });
    child.stdout.once('data', () => {
      echoMs = performance.now() - t0;
      // Ctrl-]: virtctl detaches and exits.
      child.stdin.write('\x1d');
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (echoMs !== undefined) resolve(echoMs);
      else reject(new Error(`virtctl console ended (${code ?? signal}) before any output: ${stderr}`));
    });
  });
}

async function benchConsoleAttach(ctx: BenchContext): Promise<void> {
  const bin = await ensureVirtctl();
  const node = await startBenchNode(ctx, { nodeName: NODE, namespace: NAMESPACE });
  const { clients, cluster } = node;
  await installClusterManifests(cluster.kubeconfigPath);
  const address = await defaultRouteAddress();
  if (!address) throw new Error('the host needs a default route: the apiserver dials the subresource API there');
  const api = await startSubresourceApi(clients, log, { address, port: 0 });
  ctx.defer('subresource API', () => api.close());
  const controllers = startControllers(clients, log, { retryPeriodMs: 500, onLeading: () => api.register() });
  ctx.defer('controllers', () => controllers.stop());
  await poll(
    'APIService v1.subresources.kubevirt.io Available',
    () =>
      clients.objects.read({
        apiVersion: 'apiregistration.k8s.io/v1',
        kind: 'APIService',
        metadata: { name: 'v1.subresources.kubevirt.io' },
      }),
    (s) => condition(s as { status?: { conditions?: Array<{ type: string; status: string }> } }, 'Available') === 'True',
  );
  await clients.custom.createNamespacedCustomObject({
    group: 'kubevirt.io',
    version: 'v1',
    namespace: NAMESPACE,
    plural: 'virtualmachines',
    body: { ...smokeVm(), metadata: { name: 'testvm', namespace: NAMESPACE } },
  });
  await abortable(
    waitFor(virtualMachineInstances(clients, NAMESPACE, { name: 'testvm' }), (v) => v.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: BOOT_TIMEOUT_MS,
    }),
    ctx.signal,
  );
  const kubeconfig = join(node.agentStateDir, 'bench-admin.kubeconfig');
  await writeFile(kubeconfig, clients.kc.exportConfig(), { mode: 0o600 });
  // The guest's shell answers before the first sample: what is measured is the attach, not the boot.
  const warm = openConsole(bin, [`--kubeconfig=${kubeconfig}`, `--namespace=${NAMESPACE}`, 'console', 'testvm']);
  ctx.defer('warm-up console', () => warm.kill());
  await warm.connected;
  await abortable(
    poll('the guest shell', () => warm.run('echo shell$((1+1))up', 'shell2up', 5_000).then(() => true), Boolean, {
      deadlineMs: BOOT_TIMEOUT_MS,
    }),
    ctx.signal,
  );
  warm.detach();
  await warm.exited;

  const samples: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    samples.push(await abortable(attachOnce(bin, kubeconfig, `attach${i}`), ctx.signal));
    ctx.log(`console attach ${i + 1}/${SAMPLES}: ${Math.round(samples.at(-1)!)} ms`);
  }
  ctx.emit('console_attach_ms_p50', percentile(samples, 50), 'ms');
  ctx.emit('console_attach_ms_p95', percentile(samples, 95), 'ms');
}

export const VIRTCTL_BENCHMARKS: Benchmark[] = [
  {
    name: 'virtctl.console-attach',
    description: `virtctl console started → first byte of a typed command's echo (console_attach_ms), ${SAMPLES} sessions on a booted smoke VM`,
    run: benchConsoleAttach,
  },
];
