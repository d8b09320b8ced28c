import type { V1Pod } from '@kubernetes/client-node';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { pino } from 'pino';
import t from 'tap';
import { newCa } from '../../test/helpers/fake-ca.js';
import { nodeServingPair } from '../../test/helpers/relay-certs.js';
import { MIGRATION_JOB_LABEL } from '../pods/migration-target.js';
import { readMigrationFacts, startRelayServer, type MigrationFactsSources } from './agent-relay.js';

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

t.test('the listener starts on the address; a port already held is logged and leaves the node without one', async (t) => {
  const ca = await newCa();
  const credentials = await nodeServingPair(ca, 'b');
  const logged: string[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void logged.push(JSON.parse(line).msg) });
  const start = (port: number) =>
    startRelayServer({ nodeName: 'b', address: '127.0.0.1', port, credentials, facts: sources([], undefined), onControl: () => {}, log });
  const holder = createServer().listen(0, '127.0.0.1');
  await once(holder, 'listening');
  t.teardown(() => holder.close());
  const onHeldPort = await start((holder.address() as AddressInfo).port);
  const onFreePort = await start(0);
  t.teardown(() => onFreePort?.close());
  t.same(
    { onFreePort: onFreePort !== undefined, onHeldPort, logged },
    {
      onFreePort: true,
      onHeldPort: undefined,
      logged: ['migration relay cannot listen: this node cannot receive live migrations', 'migration relay listening'],
    },
  );
});
