// `vkvm reset`: undoes `vkvm join` (see join/reset.ts).
import { parseArgs } from 'node:util';
import { ConfigError } from '../config.js';
import { resetNode } from '../join/reset.js';
import { createRootLogger } from '../log.js';

export const RESET_HELP = `Usage: vkvm reset [--state-dir DIR] [--grace-period-s N]

Leaves the cluster: stops the node agent (systemd unit or detached process),
powers off every VM on this host (ACPI, destroyed after the grace period),
deletes this host's Node, and removes the node's certificates and state from
DIR (default /var/lib/vkvm), images pulled into DIR/images included. The
downloaded-image cache (--image-cache-dir) stays. Safe to re-run: with
nothing left to reset it says so.

  --state-dir DIR       the state dir given to vkvm join (default /var/lib/vkvm)
  --grace-period-s N    seconds each guest gets to power off (default 30)
  --force               also reset a state dir that vkvm join did not set up
  --log-level LEVEL     trace|debug|info|warn|error (default warn)
`;

export async function resetCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      'state-dir': { type: 'string' },
      force: { type: 'boolean' },
      'grace-period-s': { type: 'string' },
      'log-level': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(RESET_HELP);
    return 0;
  }
  const gracePeriodS = Number(values['grace-period-s'] ?? '30');
  if (!Number.isInteger(gracePeriodS) || gracePeriodS < 0)
    throw new ConfigError('--grace-period-s', `must be a non-negative integer, got ${JSON.stringify(values['grace-period-s'])}`);
  const stateDir = values['state-dir'] ?? '/var/lib/vkvm';
  const result = await resetNode({
    stateDir,
    gracePeriodS,
    force: values.force ?? false,
    log: createRootLogger(values['log-level'] ?? 'warn'),
  });
  if (result.nothingToReset) {
    process.stdout.write(`vkvm: nothing to reset: ${stateDir} does not exist.\n`);
    return 0;
  }
  if (result.nodeWarning) process.stderr.write(`vkvm reset: ${result.nodeWarning}\n`);
  process.stdout.write(
    `vkvm: reset ${result.nodeName ? `node ${result.nodeName}` : stateDir}: ${result.vmsStopped} VM(s) stopped, Node ${result.nodeDeleted ? 'deleted' : 'not deleted'}, state removed from ${stateDir}.\n`,
  );
  return result.nodeWarning ? 1 : 0;
}
