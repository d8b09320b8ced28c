// `vkvm cluster`: the local control plane on its own (build it, or run it).
import { parseArgs } from 'node:util';
import { ensureClusterBinary, startCluster } from '../../deploy/cluster/cluster.js';
import { createRootLogger } from '../log.js';
import { onShutdownSignal, shutdownSignal } from './run-until-signal.js';

export const CLUSTER_HELP = `Usage: vkvm cluster build
       vkvm cluster up --state-dir DIR

build  compile the control plane from deploy/cluster (cached by source hash
       under $VKVM_CACHE_DIR, default /var/cache/vkvm)
up     run etcd, kube-apiserver, kube-controller-manager and kube-scheduler
       on 127.0.0.1 with state in DIR, until Ctrl-C
`;

export async function clusterCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: { 'state-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
  });
  if (!sub || sub === '--help' || sub === '-h' || values.help) {
    process.stdout.write(CLUSTER_HELP);
    return sub ? 0 : 2;
  }
  const log = createRootLogger();
  if (sub === 'build') {
    const bin = await ensureClusterBinary(log);
    process.stdout.write(`${bin}\n`);
    return 0;
  }
  if (sub === 'up') {
    if (!values['state-dir']) throw new Error('--state-dir: is required');
    const shutdown = shutdownSignal();
    const cluster = await startCluster({ stateDir: values['state-dir'], log, signal: shutdown }).catch((err: unknown) => {
      if (shutdown.aborted) return undefined;
      throw err;
    });
    if (!cluster) return 0;
    process.stdout.write(`vkvm: control plane ready. Use it with: export KUBECONFIG=${cluster.kubeconfigPath}\n`);
    await onShutdownSignal(() => cluster.stop(), shutdown);
    return 0;
  }
  process.stderr.write(`vkvm cluster: unknown command ${JSON.stringify(sub)}\n\n${CLUSTER_HELP}`);
  return 2;
}
