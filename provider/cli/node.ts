// `vkvm node`: only the node agent, against any cluster.
import { parseArgs } from 'node:util';
import { startAgent } from '../agent.js';
import { resolveAgentConfig } from '../config.js';
import { createRootLogger } from '../log.js';
import { AGENT_HELP, AGENT_OPTIONS } from './agent-flags.js';
import { onShutdownSignal, shutdownSignal } from './run-until-signal.js';

export const NODE_HELP = `Usage: vkvm node [--kubeconfig FILE] [flags]

Runs the vkvm node agent: registers this host as a Node and realizes the pods
scheduled to it. Runs in the foreground until SIGINT/SIGTERM.

${AGENT_HELP}`;

export async function nodeCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: AGENT_OPTIONS, strict: true });
  if (values.help) {
    process.stdout.write(NODE_HELP);
    return 0;
  }
  // Before the agent starts: a signal during its start-up then stops it once started.
  const shutdown = shutdownSignal();
  const config = resolveAgentConfig(values);
  const log = createRootLogger(config.logLevel);
  const agent = await startAgent(config, log);
  await onShutdownSignal(async () => {
    log.info('shutting down');
    await agent.stop();
  }, shutdown);
  return 0;
}
