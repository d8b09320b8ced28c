import { closeSync, openSync } from 'node:fs';
import t from 'tap';
import { pino } from 'pino';
import { lossyLogDestination } from './log-destination.js';

t.test('on a full disk a log line is dropped and counted, not thrown, and the process goes on', (t) => {
  const full = openSync('/dev/full', 'w'); // every write fails with ENOSPC
  t.teardown(() => closeSync(full));
  const dest = lossyLogDestination(full);
  const log = pino({}, dest);
  log.info('one');
  log.error('two');
  t.equal(dest.dropped, 2, 'both lines counted as dropped');
  t.end();
});

t.test('once writes succeed again, the first thing written says how many lines were dropped', (t) => {
  const written: string[] = [];
  let failing = true;
  const dest = lossyLogDestination((text) => {
    if (failing) throw Object.assign(new Error('no space'), { code: 'ENOSPC' });
    written.push(text);
  });
  dest.write('{"msg":"lost 1"}\n');
  dest.write('{"msg":"lost 2"}\n');
  failing = false;
  dest.write('{"msg":"kept"}\n');
  t.equal(written.length, 2);
  t.match(JSON.parse(written[0]!), { level: 40, msg: '2 log lines dropped: the log could not be written' });
  t.equal(written[1], '{"msg":"kept"}\n');
  t.equal(dest.dropped, 0);
  t.end();
});
