import { stat, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { spawnHostService } from './host-service.js';

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
