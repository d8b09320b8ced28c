// `vkvm token create` (cluster side): a bootstrap token and the join command.
import { parseArgs } from 'node:util';
import { ConfigError } from '../config.js';
import { createJoinToken, parseTtl } from '../join/token-create.js';
import { loadKubeConfig, makeClients } from '../kube/client.js';
import { kubeconfigPath } from '../kube/kubeconfig-path.js';
import { createRootLogger } from '../log.js';

export const TOKEN_HELP = `Usage: vkvm token create [--kubeconfig FILE] [--ttl 24h] [--server URL] [--description TEXT]

Creates a bootstrap token (Secret kube-system/bootstrap-token-<id>, group
system:bootstrappers:vkvm:default-node-token), applies the bootstrap RBAC
(deploy/bootstrap-rbac.yaml), publishes kube-public/cluster-info if missing,
and prints the command that joins a host, like
"kubeadm token create --print-join-command". Needs cluster-admin.

  --kubeconfig FILE     admin kubeconfig (default: $KUBECONFIG)
  --ttl DURATION        token lifetime: 24h (default), 30m, 0 = never expires
  --server URL          API server URL joining hosts use (default: the kubeconfig's)
  --description TEXT    stored in the token Secret
`;

export async function tokenCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (!sub || sub === '--help' || sub === '-h') {
    process.stdout.write(TOKEN_HELP);
    return sub ? 0 : 2;
  }
  if (sub !== 'create') throw new ConfigError('token', `unknown subcommand ${JSON.stringify(sub)}; only "create" exists`);
  const { values } = parseArgs({
    args: rest,
    options: {
      kubeconfig: { type: 'string' },
      ttl: { type: 'string' },
      server: { type: 'string' },
      description: { type: 'string' },
      'print-join-command': { type: 'boolean' },
      'log-level': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(TOKEN_HELP);
    return 0;
  }
  const kubeconfig = kubeconfigPath(values.kubeconfig, process.env);
  if (!kubeconfig) throw new ConfigError('--kubeconfig', 'is required (an admin kubeconfig of the cluster), or set $KUBECONFIG');
  if (values.server !== undefined && !/^https:\/\/[^/]+$/.test(values.server))
    throw new ConfigError('--server', `want https://HOST:PORT, got ${JSON.stringify(values.server)}`);
  const created = await createJoinToken(
    makeClients(loadKubeConfig(kubeconfig)),
    {
      ttlS: parseTtl(values.ttl ?? '24h'),
      description: values.description ?? 'vkvm join token',
      ...(values.server ? { server: values.server } : {}),
    },
    createRootLogger(values['log-level'] ?? 'warn'),
  );
  process.stdout.write(`${created.joinCommand}\n`);
  return 0;
}
