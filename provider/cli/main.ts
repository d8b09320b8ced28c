#!/usr/bin/env node
// The vkvm command line. Each command parses its own flags and has --help.
import { ConfigError } from '../config.js';
import { JoinError } from '../join/errors.js';
import { VKVM_VERSION } from '../node/status.js';
import { PreflightError } from '../preflight/checks.js';
import { clusterCommand } from './cluster.js';
import { controllersCommand } from './controllers.js';
import { csiCommand } from './csi.js';
import { imagesCommand } from './images.js';
import { joinCommand } from './join.js';
import { nodeCommand } from './node.js';
import { resetCommand } from './reset.js';
import { tokenCommand } from './token.js';
import { upCommand } from './up.js';

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

const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  up: upCommand,
  node: nodeCommand,
  cluster: clusterCommand,
  controllers: controllersCommand,
  images: imagesCommand,
  csi: csiCommand,
  token: tokenCommand,
  join: joinCommand,
  reset: resetCommand,
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
