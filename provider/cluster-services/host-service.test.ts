import { stat, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { awaitServiceReady, spawnHostService } from './host-service.js';

t.test('its output goes to a private log; stop ends it with SIGTERM and waits for the exit', async (t) => {
  const log = join(t.testdir(), 'service.log');
  const svc = spawnHostService(['sh', '-c', 'echo started; exec sleep 60'], log);
  for (let i = 0; i < 100 && !(await readFile(log, 'utf8').catch(() => '')).includes('started'); i++)
    await new Promise((r) => setTimeout(r, 50));
  t.equal(await readFile(log, 'utf8'), 'started\n', 'output appended to the log');
  t.equal((await stat(log)).mode & 0o777, 0o600, 'the log is 0600');
  await svc.stop();
  t.equal(await svc.exited, 'SIGTERM', 'ended by SIGTERM');
  await svc.stop();
  t.pass('a second stop is a no-op');
});

t.test('it runs in a process group of its own, so a Ctrl-C at the owner reaches only the owner', async (t) => {
  const svc = spawnHostService(['sleep', '60'], join(t.testdir(), 'service.log'));
  t.teardown(() => svc.stop());
  const pgrp = async (pid: number) => Number((await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ')[2]);
  t.equal(await pgrp(svc.pid!), svc.pid, 'the leader of its own group');
  t.not(await pgrp(svc.pid!), await pgrp(process.pid), "not the owner's group");
});

t.test('awaitServiceReady: ready, exited with the log tail, or a timeout naming what the probe said', async (t) => {
  const dir = t.testdir();
  const sleeper = spawnHostService(['sleep', '60'], join(dir, 'a.log'));
  t.teardown(() => sleeper.stop());
  let probes = 0;
  t.same(
    await awaitServiceReady(sleeper, {
      what: 'a',
      logFile: join(dir, 'a.log'),
      timeoutMs: 5000,
      intervalMs: 10,
      probe: async () => ({ ready: ++probes >= 3 }),
    }),
    { kind: 'ready' },
    'ready once the probe says so',
  );
  const failing = spawnHostService(['sh', '-c', 'echo one; echo boom; exit 4'], join(dir, 'b.log'));
  t.same(
    await awaitServiceReady(failing, {
      what: 'b',
      logFile: join(dir, 'b.log'),
      timeoutMs: 5000,
      intervalMs: 10,
      probe: async () => ({ ready: false }),
    }),
    { kind: 'exited', why: '4', logTail: 'one\nboom' },
    'exited: its code and the end of its log',
  );
  await t.rejects(
    awaitServiceReady(sleeper, {
      what: 'c',
      logFile: join(dir, 'a.log'),
      timeoutMs: 50,
      intervalMs: 10,
      probe: async () => ({ ready: false, detail: 'no endpoints' }),
    }),
    /c was not ready after 0.05 s \(no endpoints\)/,
    'a timeout names the service and what the probe last said',
  );
});
