import t from 'tap';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { SupervisedProcess } from './supervised-process.js';

const log = pino({ level: 'silent' });

async function until<T>(what: string, get: () => Promise<T> | T, ok: (v: T) => boolean, deadlineMs = 10_000): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const v = await get();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what}: last ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

t.test(
  'a process that exits is started again, its command made afresh, with its environment, its output appended to its log',
  async (t) => {
    const logFile = join(t.testdir(), 'out.log');
    let runs = 0;
    const p = new SupervisedProcess({
      name: 'greeter',
      command: async () => ({ argv: ['sh', '-c', `echo "run ${++runs} $GREETING"; exit 3`], env: { GREETING: 'hello' } }),
      logFile,
      log,
    });
    p.start();
    t.teardown(() => p.stop());
    const text = await until(
      'two runs',
      () => readFile(logFile, 'utf8').catch(() => ''),
      (s) => s.split('\n').filter(Boolean).length >= 2,
    );
    t.same(text.split('\n').slice(0, 2), ['run 1 hello', 'run 2 hello'], 'each run wrote to the same log');
  },
);

t.test('stop ends the running process and no run follows', async (t) => {
  const logFile = join(t.testdir(), 'out.log');
  const p = new SupervisedProcess({
    name: 'sleeper',
    command: async () => ({ argv: ['sh', '-c', 'echo started; exec sleep 600'] }),
    logFile,
    log,
  });
  p.start();
  const pid = await until(
    'the process',
    () => p.pid,
    (v) => v !== undefined,
  );
  await until(
    'its output',
    () => readFile(logFile, 'utf8').catch(() => ''),
    (s) => s.includes('started'),
  );
  await p.stop();
  t.notOk(alive(pid!), 'the process is gone');
  t.equal(p.pid, undefined, 'nothing runs');
  await new Promise((r) => setTimeout(r, 1500));
  t.equal((await readFile(logFile, 'utf8')).trim(), 'started', 'and it was not started again');
});
