import { duplexPair } from 'node:stream';
import t from 'tap';
import { ControlChannel } from './control-channel.js';
import type { ControlMessage } from './frames.js';

t.test('messages both ways; next() waits for one kind, rejects on the peer’s abort', async (t) => {
  const [a, b] = duplexPair();
  const seen: ControlMessage[] = [];
  const left = new ControlChannel(a, { heartbeatMs: 20 });
  const right = new ControlChannel(b, { heartbeatMs: 20, onMessage: (m) => seen.push(m) });
  t.teardown(() => (left.close(), right.close()));
  const ready = left.next('ready', 1000);
  left.send({ type: 'hello', uid: 'm-1' });
  right.send({ type: 'ready', paths: { consoleSocket: '/c' } });
  t.same(await ready, { type: 'ready', paths: { consoleSocket: '/c' } }, 'the message waited for');
  await new Promise((r) => setTimeout(r, 60));
  t.same(seen, [{ type: 'hello', uid: 'm-1' }], 'pings are not messages');
  const ack = left.next('ack', 1000);
  right.send({ type: 'abort', reason: 'canceled' });
  await t.rejects(ack, /the peer aborted: canceled/);
});

t.test('a peer silent past the limit is gone: the channel closes, waiters reject, the owner is told once', async (t) => {
  const [a] = duplexPair();
  const reasons: string[] = [];
  const channel = new ControlChannel(a, { heartbeatMs: 10, lostAfterMs: 50, onClose: (e) => reasons.push(e.message) });
  await t.rejects(channel.next('ack', 5000), /sent nothing for 0.05 s/);
  channel.close();
  t.same({ closed: channel.closed, reasons }, { closed: true, reasons: ['the peer sent nothing for 0.05 s'] });
});

t.test('the peer ending the stream ends the channel', async (t) => {
  const [a, b] = duplexPair();
  let reason = '';
  const channel = new ControlChannel(a, { onClose: (e) => (reason = e.message) });
  const next = channel.next('ack', 5000);
  b.end();
  await t.rejects(next);
  t.ok(channel.closed && reason !== '', `closed: ${reason}`);
});
