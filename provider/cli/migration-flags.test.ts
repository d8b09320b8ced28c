import t from 'tap';
import { parseArgs } from 'node:util';
import { evictionStrategy, MIGRATION_OPTIONS, migrationDefaults } from './migration-flags.js';

const parse = (args: string[]) => migrationDefaults(parseArgs({ args, options: MIGRATION_OPTIONS, strict: true }).values);

t.test("the migration flags default to KubeVirt's settings and refuse bad values naming the flag", async (t) => {
  t.same(parse([]), {
    perCluster: 5,
    outboundPerNode: 2,
    progressTimeoutS: 150,
    completionTimeoutPerGiB: 150,
    bandwidthPerMigration: '0',
    allowAutoConverge: false,
  });
  t.match(parse(['--migrations-per-cluster', '1', '--migration-bandwidth', '64Mi', '--migration-allow-auto-converge']), {
    perCluster: 1,
    bandwidthPerMigration: '64Mi',
    allowAutoConverge: true,
  });
  t.throws(() => parse(['--outbound-migrations-per-node', '0']), /--outbound-migrations-per-node/);
  t.throws(() => parse(['--migration-bandwidth', 'lots']), /--migration-bandwidth/);
  t.throws(() => parse(['--migration-progress-timeout', '2m']), /--migration-progress-timeout/);
});

t.test('--eviction-strategy defaults to None, as KubeVirt, and takes only its strategies', async (t) => {
  const strategy = (args: string[]) => evictionStrategy(parseArgs({ args, options: MIGRATION_OPTIONS, strict: true }).values);
  t.same([strategy([]), strategy(['--eviction-strategy', 'LiveMigrate'])], ['None', 'LiveMigrate']);
  t.throws(() => strategy(['--eviction-strategy', 'Migrate']), /--eviction-strategy: must be one of None, LiveMigrate/);
});
