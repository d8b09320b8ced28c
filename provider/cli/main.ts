#!/usr/bin/env node
// The vkvm command line. Each command parses its own flags and has --help.
import { ConfigError } from '../config-error.js';
import { JoinError } from '../join/errors.js';
import { VKVM_VERSION } from '../node/status.js';
import { PreflightError } from '../preflight/checks.js';

const HELP = `vkvm ${VKVM_VERSION}: run virtual machines as Kubernetes workloads.

Usage: vkvm <command> [flags]

Commands:
  up           local control plane + this host as a node (quickstart)
  node         run the node agent against an existing cluster
  cluster      build or run the local control plane alone
  controllers  run the cluster-wide VM/VMI controllers (leader-elected)
  images       the node's image store: ls, pull, rm, import
  csi          run vkvm's CSI driver for volumes on this host
  token        create a bootstrap token and print the join command (cluster side)
  join         join this host to an existing cluster as a node
  reset        leave the cluster: stop the agent and VMs, delete the Node, remove state
  version      print the version

Run 'vkvm <command> --help' for a command's flags. vkvm runs as root, like a kubelet.
`;

// Each command's modules load when it runs: one command never pays for
// another's (the agent's, the API clients', gRPC), which is most of a short
// command's start-up (`vkvm version` 1.1 s → see docs/benchmarks-log.md).
const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  up: async (argv) => (await import('./up.js')).upCommand(argv),
  node: async (argv) => (await import('./node.js')).nodeCommand(argv),
  cluster: async (argv) => (await import('./cluster.js')).clusterCommand(argv),
  controllers: async (argv) => (await import('./controllers.js')).controllersCommand(argv),
  images: async (argv) => (await import('./images.js')).imagesCommand(argv),
  csi: async (argv) => (await import('./csi.js')).csiCommand(argv),
  token: async (argv) => (await import('./token.js')).tokenCommand(argv),
  join: async (argv) => (await import('./join.js')).joinCommand(argv),
  reset: async (argv) => (await import('./reset.js')).resetCommand(argv),
  version: async () => {
    process.stdout.write(`vkvm ${VKVM_VERSION}\n`);
    return 0;
  },
};

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (!cmd || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(HELP);
    return cmd ? 0 : 2;
  }
  const run = COMMANDS[cmd];
  if (!run) {
    process.stderr.write(`vkvm: unknown command ${JSON.stringify(cmd)}\n\n${HELP}`);
    return 2;
  }
  return run(rest);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    const e = err as Error & { code?: unknown };
    // Bad flags and bad config are the user's to fix: say which, without a stack. (An API error's code is a number.)
    const parseError = typeof e.code === 'string' && e.code.startsWith('ERR_PARSE_ARGS');
    if (err instanceof ConfigError || err instanceof JoinError || err instanceof PreflightError || parseError)
      process.stderr.write(`vkvm: ${e.message}\n`);
    else process.stderr.write(`vkvm: ${e.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
