import { PassThrough } from 'node:stream';
import t from 'tap';
import {
  encodeControl,
  encodeHeader,
  encodeReply,
  MAX_HEADER_BYTES,
  parseControl,
  parseHeader,
  parseReply,
  type ControlMessage,
} from './frames.js';
import { readLine } from './line-reader.js';

const UID = '3f1c2a7e-5b0d-4c8e-9a61-2d4f8b7c9e10';

t.test('a header round-trips, one line of at most 1 KiB', async (t) => {
  const line = encodeHeader({ uid: UID, kind: 'disk', n: 2 });
  t.equal(line.at(-1), 0x0a, 'ends with a newline');
  t.same(parseHeader(line.subarray(0, -1)), { v: 1, uid: UID, kind: 'disk', n: 2 });
});

t.test('a bad header is refused naming the field', async (t) => {
  const rows: [string, string | Buffer, RegExp][] = [
    ['garbage', 'not json at all', /^header: is not JSON$/],
    ['an array', '[1,2]', /^header: is not a JSON object$/],
    [
      'oversize',
      JSON.stringify({ v: 1, uid: UID, kind: 'control', n: 0, pad: 'x'.repeat(MAX_HEADER_BYTES) }),
      /^header: is \d+ bytes, more than 1024$/,
    ],
    ['no version', JSON.stringify({ uid: UID, kind: 'control', n: 0 }), /^header\.v: want 1, got undefined$/],
    ['a later version', JSON.stringify({ v: 2, uid: UID, kind: 'control', n: 0 }), /^header\.v: want 1, got 2$/],
    ['no uid', JSON.stringify({ v: 1, kind: 'control', n: 0 }), /^header\.uid: want a string, got nothing$/],
    ['a uid with a slash', JSON.stringify({ v: 1, uid: '../x', kind: 'control', n: 0 }), /^header\.uid: "\.\.\/x" is malformed$/],
    [
      'an unknown kind',
      JSON.stringify({ v: 1, uid: UID, kind: 'shell', n: 0 }),
      /^header\.kind: want one of control\|libvirt\|memory\|disk, got "shell"$/,
    ],
    ['a negative n', JSON.stringify({ v: 1, uid: UID, kind: 'disk', n: -1 }), /^header\.n: want an integer in \[0, 65535\], got -1$/],
    ['a fractional n', JSON.stringify({ v: 1, uid: UID, kind: 'disk', n: 1.5 }), /^header\.n: /],
    ['binary', Buffer.from([0xff, 0xfe, 0x00, 0x7b]), /^header: is not JSON$/],
  ];
  for (const [what, line, message] of rows) t.throws(() => parseHeader(line), { kind: 'FrameError', message }, what);
  t.throws(
    () => encodeHeader({ uid: 'bad uid', kind: 'control', n: 0 }),
    { field: 'header.uid', message: /^header\.uid: / },
    'encoding refuses what parsing would',
  );
});

t.test('replies: accepted, or refused with a reason', async (t) => {
  t.same(parseReply(encodeReply({ ok: true }).subarray(0, -1)), { ok: true });
  t.same(parseReply(encodeReply({ ok: false, reason: 'wrong peer' }).subarray(0, -1)), { ok: false, reason: 'wrong peer' });
  t.throws(() => parseReply('{"ok":"yes"}'), { field: 'reply.ok', message: /^reply\.ok: want true or false/ });
  t.throws(() => parseReply('{"ok":false}'), { field: 'reply.reason', message: /^reply\.reason: / });
});

t.test('every control message round-trips', async (t) => {
  const messages: ControlMessage[] = [
    { type: 'hello', uid: UID },
    { type: 'file', role: 'cloudInit:cloudinitdisk', content: Buffer.from('seed').toString('base64') },
    { type: 'file', role: 'nvram', content: '' },
    { type: 'ready', paths: { diskPaths: { vda: '/x' } } },
    { type: 'commit' },
    { type: 'ack' },
    { type: 'ping' },
    { type: 'abort', reason: 'canceled' },
  ];
  t.same(
    messages.map((m) => parseControl(encodeControl(m).subarray(0, -1))),
    messages,
  );
});

t.test('a bad control message is refused naming the field', async (t) => {
  const rows: [string, RegExp][] = [
    ['{"type":"shell"}', /^control\.type: want hello\|file\|ready\|commit\|ack\|ping\|abort, got "shell"$/],
    ['{}', /^control\.type: .* got nothing$/],
    ['{"type":"hello"}', /^control\.uid: want a string/],
    ['{"type":"file","role":"/etc/passwd","content":""}', /^control\.role: "\/etc\/passwd" is malformed$/],
    ['{"type":"file","role":"nvram","content":"not base64!"}', /^control\.content: /],
    ['{"type":"ready","paths":[]}', /^control\.paths: want an object, got \[\]$/],
    ['{"type":"abort"}', /^control\.reason: /],
    ['}{', /^control: is not JSON$/],
  ];
  for (const [line, message] of rows) t.throws(() => parseControl(line), { kind: 'FrameError', message }, line);
});

t.test('readLine takes one line and leaves the rest of the stream unread', async (t) => {
  const stream = new PassThrough();
  stream.write('{"v":1,');
  stream.write('"uid":"a","kind":"memory","n":0}\nRAW');
  stream.end(' BYTES');
  const line = await readLine(stream, MAX_HEADER_BYTES, 'header');
  const rest: Buffer[] = [];
  for await (const chunk of stream) rest.push(chunk as Buffer);
  t.same(
    { header: parseHeader(line), rest: Buffer.concat(rest).toString() },
    { header: { v: 1, uid: 'a', kind: 'memory', n: 0 }, rest: 'RAW BYTES' },
  );
});

t.test('readLine refuses a line too long or cut short, naming the field', async (t) => {
  const long = new PassThrough();
  long.write(Buffer.alloc(MAX_HEADER_BYTES + 1, 0x41));
  await t.rejects(readLine(long, MAX_HEADER_BYTES, 'header'), { kind: 'FrameError', message: 'header: is longer than 1024 bytes' });
  const cut = new PassThrough();
  cut.end('{"v":1');
  await t.rejects(readLine(cut, MAX_HEADER_BYTES, 'reply'), { message: 'reply: the stream ended before the line did' });
});
