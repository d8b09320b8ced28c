import t from 'tap';
import type { MigrationPolicy } from '../../kubevirt/types.js';
import { checkBandwidth, KUBEVIRT_MIGRATION_DEFAULTS, matchPolicy, migrationSettings } from './policy.js';

const policy = (name: string, vmi: Record<string, string> = {}, ns: Record<string, string> = {}, spec = {}): MigrationPolicy => ({
  metadata: { name },
  spec: { selectors: { virtualMachineInstanceSelector: vmi, namespaceSelector: ns }, ...spec },
});

t.test('the policy matching the most labels wins; a tie goes to the lowest name; one unmatched label rules a policy out', async (t) => {
  const vmiLabels = { app: 'db', tier: 'gold' };
  const ns = { team: 'a' };
  const cases: Array<[string, MigrationPolicy[], string | undefined]> = [
    ['none', [policy('x', { app: 'web' })], undefined],
    ['empty selectors match everything', [policy('all')], 'all'],
    ['more VMI labels win', [policy('one', { app: 'db' }), policy('two', { app: 'db', tier: 'gold' })], 'two'],
    ['VMI labels before namespace labels', [policy('ns', {}, { team: 'a' }), policy('vmi', { app: 'db' })], 'vmi'],
    ['then namespace labels', [policy('b', { app: 'db' }, { team: 'a' }), policy('a', { app: 'db' })], 'b'],
    ['a tie by name', [policy('zz', { app: 'db' }), policy('aa', { tier: 'gold' })], 'aa'],
    ['one unmatched label rules out', [policy('x', { app: 'db', tier: 'silver' })], undefined],
  ];
  for (const [name, policies, want] of cases) t.equal(matchPolicy(policies, vmiLabels, ns)?.metadata.name, want, name);
});

t.test("KubeVirt's defaults, overridden by the policy's settings", async (t) => {
  t.same(migrationSettings(KUBEVIRT_MIGRATION_DEFAULTS, undefined), {
    configuration: {
      allowAutoConverge: false,
      bandwidthPerMigration: '0',
      completionTimeoutPerGiB: 150,
      progressTimeout: 150,
      allowWorkloadDisruption: false,
      allowPostCopy: false,
    },
  });
  t.match(
    migrationSettings(KUBEVIRT_MIGRATION_DEFAULTS, policy('slow', {}, {}, { bandwidthPerMigration: '1Mi', allowAutoConverge: true })),
    {
      policyName: 'slow',
      configuration: { bandwidthPerMigration: '1Mi', allowAutoConverge: true, completionTimeoutPerGiB: 150 },
    },
  );
  t.throws(() => checkBandwidth('fast'), /not a quantity/);
  t.equal(checkBandwidth('64Mi'), '64Mi');
});
