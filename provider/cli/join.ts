// `vkvm join`: this host becomes a node of an existing cluster (see join/join.ts).
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, resolveAgentConfig, type AgentFlags } from '../config.js';
import { parseBootstrapToken } from '../join/bootstrap-token.js';
import { parseCaCertHash } from '../join/discovery.js';
import { joinCluster } from '../join/join.js';
import { createRootLogger } from '../log.js';
import { AGENT_HELP, AGENT_OPTIONS } from './agent-flags.js';

/** The agent flags join passes through: not those it sets itself (and their continuation lines). */
function agentHelpForJoin(): string {
  const out: string[] = [];
  let skipping = false;
  for (const line of AGENT_HELP.split('\n')) {
    const flag = /^\s+--([\w-]+)/.exec(line)?.[1];
    if (flag) skipping = ['kubeconfig', 'approve-serving-csr', 'rotate-client-cert'].includes(flag);
    if (!skipping) out.push(line);
  }
  return out.join('\n');
}

export const JOIN_HELP = `Usage: vkvm join --server https://HOST:PORT --token ID.SECRET --discovery-token-ca-cert-hash sha256:HEX [flags]

Joins this host to an existing cluster as a vkvm node, from the same inputs as
kubeadm join (print them with "vkvm token create" on the cluster side):
checks the host (a failed hard requirement stops here, changing nothing),
verifies the cluster CA against the hash, obtains the node's client
certificate through a CSR under the bootstrap token, writes
STATE_DIR/kubeconfig, and starts the agent (systemd unit vkvm.service where
systemd runs, else a detached process with STATE_DIR/agent.pid). Re-running
it restarts the agent. "vkvm reset" undoes it.

  --server URL                          API server URL (required)
  --token ID.SECRET                     bootstrap token (required)
  --discovery-token-ca-cert-hash HASH   sha256:<hex> of the cluster CA's public key (required, repeatable)
  --no-systemd                          run the agent as a detached process even where systemd is PID 1
  --ready-timeout-s N                   how long to wait for the Node to become Ready (default 300)

${agentHelpForJoin()}`;

const JOIN_OPTIONS = {
  ...AGENT_OPTIONS,
  server: { type: 'string' },
  token: { type: 'string' },
  'discovery-token-ca-cert-hash': { type: 'string', multiple: true },
  'no-systemd': { type: 'boolean' },
  'ready-timeout-s': { type: 'string' },
} as const;

/** Flags join sets itself and must not be passed through to the agent. */
const OWN_FLAGS = new Set([
  'server',
  'token',
  'discovery-token-ca-cert-hash',
  'no-systemd',
  'ready-timeout-s',
  'kubeconfig',
  'state-dir',
  'rotate-client-cert',
  'approve-serving-csr',
  'help',
]);

/** The agent flags given to join, as arguments for `vkvm node`. */
export function agentArgsOf(values: Record<string, unknown>): string[] {
  const args: string[] = [];
  for (const [k, v] of Object.entries(values)) {
    if (OWN_FLAGS.has(k) || v === undefined || v === false) continue;
    for (const item of Array.isArray(v) ? v : [v]) args.push(item === true ? `--${k}` : `--${k}=${String(item)}`);
  }
  return args;
}

export async function joinCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: JOIN_OPTIONS, strict: true });
  if (values.help) {
    process.stdout.write(JOIN_HELP);
    return 0;
  }
  if (values.kubeconfig)
    throw new ConfigError(
      '--kubeconfig',
      'join writes the node kubeconfig itself (STATE_DIR/kubeconfig); use "vkvm node" to run with your own',
    );
  if (values['approve-serving-csr'])
    throw new ConfigError(
      '--approve-serving-csr',
      'a joined node cannot approve CSRs; the vkvm controllers approve its serving certificate',
    );
  if (!values.server) throw new ConfigError('--server', 'is required (the API server URL, https://HOST:PORT)');
  let server: URL;
  try {
    server = new URL(values.server);
  } catch {
    throw new ConfigError('--server', `${JSON.stringify(values.server)} is not a URL`);
  }
  if (server.protocol !== 'https:') throw new ConfigError('--server', `must be an https:// URL, got ${JSON.stringify(values.server)}`);
  if (!values.token) throw new ConfigError('--token', 'is required (a bootstrap token; "vkvm token create" prints one)');
  const hashes = values['discovery-token-ca-cert-hash'] ?? [];
  if (!hashes.length) throw new ConfigError('--discovery-token-ca-cert-hash', 'is required (sha256:<hex>; "vkvm token create" prints it)');
  const readyTimeoutS = Number(values['ready-timeout-s'] ?? '300');
  if (!Number.isInteger(readyTimeoutS) || readyTimeoutS < 1)
    throw new ConfigError('--ready-timeout-s', `must be a positive integer, got ${JSON.stringify(values['ready-timeout-s'])}`);
  const stateDir = values['state-dir'] ?? '/var/lib/vkvm';
  // On by default, as kubeadm's kube-proxy DaemonSet would run on the host; --kube-proxy=false leaves it to the operator.
  const agentValues = { ...values, 'kube-proxy': values['kube-proxy'] ?? 'true' };
  const agent = resolveAgentConfig({
    ...(agentValues as AgentFlags),
    kubeconfig: join(stateDir, 'kubeconfig'),
    'state-dir': stateDir,
    'rotate-client-cert': true,
  });
  // The join reports in plain text; its own JSON log only on request (--log-level also goes to the agent).
  const log = createRootLogger(values['log-level'] ?? 'warn');
  const result = await joinCluster(
    {
      server: server.origin,
      token: parseBootstrapToken(values.token),
      caHashes: hashes.map((h) => parseCaCertHash(h)),
      agent,
      agentArgs: agentArgsOf(agentValues),
      noSystemd: values['no-systemd'] ?? false,
      env: process.env,
      clientCertTimeoutMs: 120_000,
      readyTimeoutMs: readyTimeoutS * 1000,
      servingCertTimeoutMs: 60_000,
      report: (text) => process.stderr.write(text),
    },
    log,
  );
  if (!result.kubeletApiServing) {
    process.stderr.write(
      'vkvm join: warning: the kubelet-serving certificate is not issued yet, so kubectl logs/exec cannot reach this node; ' +
        'its CSR needs an approver: run "vkvm controllers" (or approve it: kubectl get csr). The node runs pods meanwhile, ' +
        'and the agent keeps asking and starts its kubelet API once the certificate is issued.\n',
    );
  }
  process.stdout.write(
    `vkvm: this host joined the cluster as node ${result.nodeName} (Ready${result.alreadyJoined ? '; it had joined before, agent restarted' : ''}); ` +
      `the agent runs as ${result.service === 'systemd' ? 'systemd unit vkvm.service' : `a detached process (${join(stateDir, 'agent.pid')}, log ${join(stateDir, 'agent.log')})`}.\n`,
  );
  return 0;
}
