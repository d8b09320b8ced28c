import t from 'tap';
import { parseDiskIo, rateOf } from './disk-io.js';

t.test('a sequential job is read as MiB/s, a random one as IOPS', async (t) => {
  const seq = parseDiskIo('seq-write bytes=268435456 ops=256 ns=2000000000\n');
  const rand = parseDiskIo('some noise\nrand-read bytes=40960 ops=10 ns=500000000\n');
  t.same(
    { seq, seqRate: rateOf(seq), rand, randRate: rateOf(rand) },
    {
      seq: { mode: 'seq-write', bytes: 268435456, ops: 256, ns: 2e9 },
      seqRate: { value: 128, unit: 'MiB/s' },
      rand: { mode: 'rand-read', bytes: 40960, ops: 10, ns: 5e8 },
      randRate: { value: 20, unit: 'IOPS' },
    },
    '256 MiB in 2 s is 128 MiB/s; 10 requests in 0.5 s are 20 IOPS',
  );
});

t.test('output without a sound result line is refused, quoting it', async (t) => {
  t.throws(() => parseDiskIo('disk-io: open failed, errno 2\n'), /printed no result line: "disk-io: open failed, errno 2\\n"/);
  t.throws(() => parseDiskIo('rand-write bytes=0 ops=0 ns=5000\n'), /measured nothing/);
  t.throws(() => parseDiskIo('seq-copy bytes=1 ops=1 ns=1\n'), /no result line/);
});
