// `vkvm controllers`: only the cluster-wide controllers (VM/VMI, serving CSR approver), leader-elected,
// against any cluster (`vkvm up` runs them beside the node agent).
import { parseArgs } from 'node:util';
import { ConfigError } from '../config.js';
import { loadKubeConfig, makeClients } from '../kube/client.js';
import { kubeconfigPath } from '../kube/kubeconfig-path.js';
import { createRootLogger } from '../log.js';
import { startControllers } from '../controllers/cluster-controllers.js';
import { onShutdownSignal } from './run-until-signal.js';
import { APPROVER_OPTIONS, approverHelp, servingCsrPolicy } from './approver-flags.js';
import { evictionStrategy, MIGRATION_HELP, MIGRATION_OPTIONS, migrationDefaults } from './migration-flags.js';
import { defaultRouteAddress } from '../node/default-address.js';
import { DEFAULT_SUBRESOURCES_PORT, parsePort, startSubresourceApi } from '../subresources/start.js';

export const CONTROLLERS_HELP = `Usage: vkvm controllers [--kubeconfig FILE] [flags]

Runs the cluster-wide VirtualMachine and VirtualMachineInstance controllers
(KubeVirt's virt-controller role): a VM's run strategy creates or deletes its
VMI, and each VMI gets a virt-launcher pod that the scheduler places on a vkvm
node, which alone may read it. Serves KubeVirt's subresource API (virtctl
start, stop, console, …) as the APIService v1.subresources.kubevirt.io, and
the eviction webhook that makes a drain migrate VMs (--eviction-strategy). Also
approves the kubelet-serving CSRs of nodes (vkvm join) whose names and
addresses check out, and denies the rest. Any number may run; the one holding
the Lease kube-system/vkvm-controllers acts. Runs in the foreground until
SIGINT/SIGTERM. Needs the vkvm:controllers
ClusterRole (deploy/rbac.yaml) bound to its identity.

  --kubeconfig FILE    kubeconfig of the cluster (default: $KUBECONFIG)
  --identity NAME      lease holder identity (default <hostname>_<pid>)
  --subresources-address IP
                       where KubeVirt's subresource API (virtctl) listens, an
                       address the kube-apiserver reaches (default: this
                       host's default-route address)
  --subresources-port PORT
                       its port (default 8443; 0 picks a free one)
  --log-level LEVEL    trace, debug, info (default), warn, error
  -h, --help           show this help

${approverHelp('none: no serving certificate with an IP SAN is approved')}
${MIGRATION_HELP}`;

export async function controllersCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: 'string' },
      identity: { type: 'string' },
      'subresources-address': { type: 'string' },
      'subresources-port': { type: 'string', default: String(DEFAULT_SUBRESOURCES_PORT) },
      'log-level': { type: 'string', default: 'info' },
      help: { type: 'boolean', short: 'h' },
      ...APPROVER_OPTIONS,
      ...MIGRATION_OPTIONS,
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(CONTROLLERS_HELP);
    return 0;
  }
  const kubeconfig = kubeconfigPath(values.kubeconfig, process.env);
  if (!kubeconfig) throw new ConfigError('--kubeconfig', 'is required (or set $KUBECONFIG)');
  const servingCsr = servingCsrPolicy(values, () => []);
  const migration = migrationDefaults(values);
  const eviction = evictionStrategy(values);
  const log = createRootLogger(values['log-level']);
  if (!servingCsr.nodeIpRanges.length)
    log.warn('no --node-ip-ranges: serving certificates with an IP SAN (every vkvm node asks for one) are denied');
  const clients = makeClients(loadKubeConfig(kubeconfig));
  const address = values['subresources-address'] ?? (await defaultRouteAddress());
  if (!address) throw new ConfigError('--subresources-address', 'the host has no default route: give --subresources-address');
  const subresources = await startSubresourceApi(clients, log.child({ component: 'subresource-api' }), {
    address,
    port: parsePort('--subresources-port', values['subresources-port']),
    evictionStrategy: eviction,
  });
  const controllers = startControllers(clients, log.child({ component: 'controllers' }), {
    ...(values.identity ? { identity: values.identity } : {}),
    servingCsr,
    migration,
    evictionStrategy: eviction,
    onLeading: () => subresources.register(),
  });
  log.info('controllers running; waiting for leadership');
  await onShutdownSignal(async () => {
    log.info('shutting down');
    await controllers.stop();
    await subresources.close();
  });
  return 0;
}
