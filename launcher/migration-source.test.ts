// The source side's own rules, with a fake domain driver and an injected clock: idempotent starts, refusals as
// error kinds, the monitor's timeouts turning into an aborted job and a Failed state, and the commit being final.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import t from 'tap';
import type { IncomingPaths } from '../vmm/domain/migration-xml.js';
import type { JobStats } from './job-stats.js';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { DEST_XML_NAME, MigrationSource, type SourceDriver, type StartMigration } from './migration-source.js';
import type { MigrationState } from './state.js';

const SOURCE_XML = await readFile(fileURLToPath(new URL('../vmm/domain/testdata/migration/source.xml', import.meta.url)), 'utf8');
const T = '/t';
const PATHS: IncomingPaths = {
  diskPaths: { root: `${T}/root.qcow2`, data: `${T}/data.qcow2`, cloudinit: `${T}/ci.iso` },
  consoleSocket: `${T}/c.sock`,
  agentSocket: `${T}/a.sock`,
  vncSocket: `${T}/v.sock`,
  nvramPath: '',
  bootPaths: { kernel: `${T}/k`, initrd: `${T}/i` },
};
const REQUEST: StartMigration = {
  uid: 'm1',
  destUri: 'qemu+unix:///system?socket=/run/libvirt/m/lv',
  memoryUri: 'unix:///run/libvirt/m/mem',
  disksUri: 'unix:///run/libvirt/m/nbd',
  migrateDisks: [],
  targetPaths: PATHS,
  maxDowntimeMs: 0,
  progressTimeoutS: 10,
  completionTimeoutS: 0,
  allowWorkloadDisruption: false,
};

/** A domain whose migration job ends when the test says, or fails when aborted; `remaining` is what domjobinfo says. */
function fakeDriver(domainState = 'running') {
  let settle!: (err?: Error) => void;
  const calls: string[] = [];
  const job = { remaining: 1000 };
  const driver: SourceDriver = {
    state: async () => domainState as 'running',
    migratableXml: async () => SOURCE_XML,
    migrate: (_uuid, o) => {
      calls.push(`migrate ${o.disks.join(',')}`);
      return new Promise<void>((resolve, reject) => (settle = (err) => (err ? reject(err) : resolve())));
    },
    jobStats: async (_uuid, completed) =>
      ({
        timeElapsedMs: 1,
        dataTotal: 2,
        dataProcessed: 1,
        dataRemaining: completed ? 0 : job.remaining,
        memoryDirtyRate: 0,
        iteration: 1,
        downtimeMs: 5,
      }) as JobStats,
    abortJob: async () => {
      calls.push('abort');
      settle(new Error('operation aborted: migration out job: canceled by client'));
    },
    suspend: async () => void calls.push('suspend'),
    resume: async () => void calls.push('resume'),
    setMaxDowntime: async () => {},
  };
  return { driver, calls, job, complete: () => settle() };
}

function source(driver: SourceDriver, clock: { ms: number }) {
  const published: MigrationState[] = [];
  const dir = t.testdir();
  const s = new MigrationSource({
    driver,
    domainUuid: () => 'dom',
    dir,
    publish: (m) => published.push(m),
    log: pino({ level: 'silent' }),
    // Each poll advances the clock one second.
    now: () => clock.ms,
    pollMs: 1,
  });
  return { s, published, dir };
}

const until = async (cond: () => boolean): Promise<void> => {
  while (!cond()) await new Promise((r) => setTimeout(r, 2));
};

t.test('a started migration copies the writable disks; a repeat is a no-op; the commit is final', async (t) => {
  const fake = fakeDriver();
  const clock = { ms: 0 };
  const { s, published, dir } = source(fake.driver, clock);
  t.match(await s.start(REQUEST), { uid: 'm1', role: 'Source', phase: 'Running' });
  t.ok(existsSync(join(dir, DEST_XML_NAME)), 'the destination XML is written for virsh');
  t.match(await s.start(REQUEST), { uid: 'm1', phase: 'Running' }, 'the same uid again');
  t.match(await s.start({ ...REQUEST, uid: 'm2' }).catch((e: unknown) => e), { kind: 'Precondition' }, 'another uid while one runs');
  fake.complete();
  await until(() => published.at(-1)?.phase === 'Migrated');
  t.same(fake.calls, ['migrate vda,vdb'], 'the overlay and the empty disk are copied, once');
  t.match(published.at(-1), { phase: 'Migrated', stats: { dataRemaining: 0, downtimeMs: 5 } }, 'the completed job figures');
  t.notOk(existsSync(join(dir, DEST_XML_NAME)), 'and removed once the job ended');
  t.match(await s.abort('m1').catch((e: unknown) => e), { kind: 'Precondition' }, 'no abort after the commit');
  t.match(await s.start({ ...REQUEST, uid: 'm3' }).catch((e: unknown) => e), { kind: 'Precondition' }, 'no second migration');
});

t.test('no new low of data_remaining for the progress timeout aborts the job: Failed, the VM stays', async (t) => {
  const fake = fakeDriver();
  const clock = { ms: 0 };
  const { s, published } = source(fake.driver, clock);
  await s.start(REQUEST);
  const ticker = setInterval(() => (clock.ms += 1000), 1);
  t.teardown(() => clearInterval(ticker));
  await until(() => published.at(-1)?.phase === 'Failed');
  t.match(published.at(-1), { phase: 'Failed', reason: 'MigrationProgressTimeout', message: /no progress for 1\d s/ });
  t.same(fake.calls, ['migrate vda,vdb', 'abort'], 'the monitor aborted the job once');
  t.match(await s.abort('m1'), { phase: 'Failed' }, 'AbortMigration on a failed one returns its state');
});

t.test('at the completion timeout with disruption allowed the guest is paused, then resumed when the job fails', async (t) => {
  const fake = fakeDriver();
  const clock = { ms: 0 };
  const { s, published } = source(fake.driver, clock);
  await s.start({ ...REQUEST, progressTimeoutS: 0, completionTimeoutS: 5, allowWorkloadDisruption: true });
  const ticker = setInterval(() => (clock.ms += 1000), 1);
  t.teardown(() => clearInterval(ticker));
  await until(() => published.at(-1)?.phase === 'Failed');
  t.match(published.at(-1), { reason: 'MigrationCompletionTimeout' });
  t.same(fake.calls, ['migrate vda,vdb', 'suspend', 'abort', 'resume']);
});

t.test('AbortMigration cancels the job and replies Aborted; bad requests are refused by kind', async (t) => {
  const fake = fakeDriver();
  const { s } = source(fake.driver, { ms: 0 });
  await s.start(REQUEST);
  t.match(await s.abort('m1'), { phase: 'Aborted', reason: 'AbortRequested' });
  t.match(await s.abort('other').catch((e: unknown) => e), { kind: 'Precondition' }, 'an unknown uid');
  const missing = await s.start({ ...REQUEST, uid: 'm4', targetPaths: { ...PATHS, agentSocket: '' } }).catch((e: unknown) => e);
  t.match(missing, { kind: 'InvalidArgument', fieldPaths: ['targetPaths.agentSocket'] }, 'a target path the domain needs');
  const stopped = source(fakeDriver('paused').driver, { ms: 0 }).s;
  t.match(await stopped.start(REQUEST).catch((e: unknown) => e), { kind: 'Precondition', message: /paused/ }, 'a VM not running');
});
