// KubeVirt's migration settings as flags of `vkvm controllers` (vkvm has no
// KubeVirt CR to hold them); a MigrationPolicy overrides them per VMI.
import type { ParseArgsConfig } from 'node:util';
import { ConfigError } from '../config.js';
import { checkBandwidth, KUBEVIRT_MIGRATION_DEFAULTS as D, type MigrationDefaults } from '../controllers/migration/policy.js';
import { EVICTION_STRATEGIES, type EvictionStrategy } from '../kubevirt/types.js';

export const MIGRATION_OPTIONS = {
  'migrations-per-cluster': { type: 'string', default: String(D.perCluster) },
  'outbound-migrations-per-node': { type: 'string', default: String(D.outboundPerNode) },
  'migration-progress-timeout': { type: 'string', default: `${D.progressTimeoutS}s` },
  'migration-completion-timeout-per-gib': { type: 'string', default: String(D.completionTimeoutPerGiB) },
  'migration-bandwidth': { type: 'string', default: D.bandwidthPerMigration },
  'migration-allow-auto-converge': { type: 'boolean', default: D.allowAutoConverge },
  'eviction-strategy': { type: 'string', default: 'None' },
} as const satisfies ParseArgsConfig['options'];

export const MIGRATION_HELP = `Live migration flags (KubeVirt's defaults; a MigrationPolicy overrides them per VMI):
  --migrations-per-cluster N            migrations in flight at once (default ${D.perCluster})
  --outbound-migrations-per-node N      in flight out of one node (default ${D.outboundPerNode})
  --migration-progress-timeout DURATION abort when no progress for this long (default ${D.progressTimeoutS}s)
  --migration-completion-timeout-per-gib S
                                        seconds allowed per GiB copied (default ${D.completionTimeoutPerGiB})
  --migration-bandwidth QUANTITY        bytes per second per migration, 0 unlimited (default ${D.bandwidthPerMigration})
  --migration-allow-auto-converge       throttle the guest's vCPUs when copying does not converge (default off)
  --eviction-strategy STRATEGY          what a drain does to a VMI that sets no evictionStrategy: None (evict),
                                        LiveMigrate, LiveMigrateIfPossible or External (default None)
`;

interface Values {
  'migrations-per-cluster'?: string | undefined;
  'outbound-migrations-per-node'?: string | undefined;
  'migration-progress-timeout'?: string | undefined;
  'migration-completion-timeout-per-gib'?: string | undefined;
  'migration-bandwidth'?: string | undefined;
  'migration-allow-auto-converge'?: boolean | undefined;
  'eviction-strategy'?: string | undefined;
}

function positive(flag: string, raw: string | undefined, fallback: number): number {
  const n = Number(raw ?? fallback);
  if (!Number.isInteger(n) || n < 1) throw new ConfigError(`--${flag}`, `must be a whole number of at least 1, not "${raw}"`);
  return n;
}

export function migrationDefaults(v: Values): MigrationDefaults {
  const timeout = /^(\d+)s?$/.exec(v['migration-progress-timeout'] ?? `${D.progressTimeoutS}`);
  if (!timeout)
    throw new ConfigError('--migration-progress-timeout', `must be seconds such as 150s, not "${v['migration-progress-timeout']}"`);
  let bandwidth: string;
  try {
    bandwidth = checkBandwidth(v['migration-bandwidth'] ?? D.bandwidthPerMigration);
  } catch (err) {
    throw new ConfigError('--migration-bandwidth', (err as Error).message);
  }
  return {
    perCluster: positive('migrations-per-cluster', v['migrations-per-cluster'], D.perCluster),
    outboundPerNode: positive('outbound-migrations-per-node', v['outbound-migrations-per-node'], D.outboundPerNode),
    progressTimeoutS: Number(timeout[1]),
    completionTimeoutPerGiB: positive(
      'migration-completion-timeout-per-gib',
      v['migration-completion-timeout-per-gib'],
      D.completionTimeoutPerGiB,
    ),
    bandwidthPerMigration: bandwidth,
    allowAutoConverge: v['migration-allow-auto-converge'] ?? D.allowAutoConverge,
  };
}

/** The cluster's evictionStrategy, for VMIs that set none (KubeVirt's default: None). */
export function evictionStrategy(v: Values): EvictionStrategy {
  const value = v['eviction-strategy'] ?? 'None';
  if (!(EVICTION_STRATEGIES as readonly string[]).includes(value))
    throw new ConfigError('--eviction-strategy', `must be one of ${EVICTION_STRATEGIES.join(', ')}, not "${value}"`);
  return value as EvictionStrategy;
}
