import type { V1Pod } from '@kubernetes/client-node';
import t from 'tap';
import { MIGRATION_JOB_LABEL, readMigrationFacts, type MigrationFactsSources } from './agent-relay.js';

const pod = (uid: string, labels: Record<string, string>, deleting = false): V1Pod => ({
  metadata: { uid, name: uid, namespace: 'ns', labels, ...(deleting ? { deletionTimestamp: new Date() } : {}) },
});
const STATE = { migrationUid: 'm-1', sourceNode: 'a', targetNode: 'b' };

function sources(pods: V1Pod[], vmi: { status?: object } | undefined): MigrationFactsSources & { reads: string[] } {
  const reads: string[] = [];
  return {
    reads,
    pods: () => pods,
    readVmi: async (p) => {
      reads.push(p.metadata!.uid!);
      return vmi;
    },
    vmsDir: '/var/lib/vkvm/vms',
  };
}

t.test('the target pod labelled with the migration, and its VMI read afresh', async (t) => {
  const from = sources([pod('source-pod', {}), pod('target-pod', { [MIGRATION_JOB_LABEL]: 'm-1' })], { status: { migrationState: STATE } });
  t.same(
    { facts: await readMigrationFacts('m-1', from), reads: from.reads },
    { facts: { migrationState: STATE, targetPod: { vmDir: '/var/lib/vkvm/vms/target-pod' } }, reads: ['target-pod'] },
  );
});

t.test('no facts without a live target pod; a VMI gone or without migrationState gives none', async (t) => {
  const none = { migrationState: undefined, targetPod: undefined };
  const other = sources([pod('p', { [MIGRATION_JOB_LABEL]: 'm-0' })], { status: { migrationState: STATE } });
  const deleting = sources([pod('p', { [MIGRATION_JOB_LABEL]: 'm-1' }, true)], { status: { migrationState: STATE } });
  t.same(
    {
      anotherMigration: await readMigrationFacts('m-1', other),
      deleting: await readMigrationFacts('m-1', deleting),
      reads: [...other.reads, ...deleting.reads],
      vmiGone: await readMigrationFacts('m-1', sources([pod('p', { [MIGRATION_JOB_LABEL]: 'm-1' })], undefined)),
      noState: await readMigrationFacts('m-1', sources([pod('p', { [MIGRATION_JOB_LABEL]: 'm-1' })], { status: {} })),
    },
    {
      anotherMigration: none,
      deleting: none,
      reads: [],
      vmiGone: { migrationState: undefined, targetPod: { vmDir: '/var/lib/vkvm/vms/p' } },
      noState: { migrationState: undefined, targetPod: { vmDir: '/var/lib/vkvm/vms/p' } },
    },
  );
});
