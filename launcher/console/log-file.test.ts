import { readFileSync, existsSync } from 'node:fs';
import t from 'tap';
import { ConsoleLog, PARTIAL_FLUSH_MS, toCriRecords } from './log-file.js';

const at = new Date('2024-05-01T12:00:00.000Z');

t.test('toCriRecords: one record per line, CR dropped, trailing piece partial', async (t) => {
  t.equal(
    toCriRecords(Buffer.from('one\r\ntwo\n\nthree'), at).toString(),
    '2024-05-01T12:00:00.000Z stdout F one\n' +
      '2024-05-01T12:00:00.000Z stdout F two\n' +
      '2024-05-01T12:00:00.000Z stdout F \n' +
      '2024-05-01T12:00:00.000Z stdout P three\n',
  );
});

t.test('ConsoleLog joins pieces of a line, flushes a lone prompt as partial', async (t) => {
  const dir = t.testdir();
  const log = new ConsoleLog(dir, 1 << 20, () => at);
  log.startRun();
  log.write(Buffer.from('VKVM-'));
  log.write(Buffer.from('BOOTED\r\nprompt# '));
  t.equal(readFileSync(log.paths.current, 'utf8'), '2024-05-01T12:00:00.000Z stdout F VKVM-BOOTED\n', 'a line split in two is one record');
  await new Promise((r) => setTimeout(r, PARTIAL_FLUSH_MS * 2));
  t.match(readFileSync(log.paths.current, 'utf8'), /stdout P prompt# \n$/, 'the prompt is written as a partial record');
  log.close();
});

t.test('ConsoleLog rotates at the cap and keeps the previous run', async (t) => {
  const dir = t.testdir();
  const log = new ConsoleLog(dir, 100, () => at);
  log.startRun();
  for (let i = 0; i < 3; i++) log.write(Buffer.from(`line ${i}\n`));
  t.equal(readFileSync(`${log.paths.current}.1`, 'utf8').split('\n').length - 1, 2, 'two lines fit under the cap, then the file rotates');
  t.match(readFileSync(log.paths.current, 'utf8'), /line 2/);
  log.startRun();
  t.match(readFileSync(log.paths.previous, 'utf8'), /line 2/, 'the last run is the previous log');
  t.ok(existsSync(`${log.paths.previous}.1`), 'with its rotated segment');
  t.equal(readFileSync(log.paths.current, 'utf8'), '', 'the new run starts empty');
  log.close();
});
