import t, { type Test } from 'tap';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { runProbe, type GuestAgent } from './run-probe.js';

const guest = (exitCode = 0, stdout = ''): GuestAgent => ({
  exec: async () => ({ exitCode, stdout: Buffer.from(stdout), stderr: Buffer.alloc(0) }),
  ping: async () => ({}),
});
const never: GuestAgent = { exec: () => new Promise(() => undefined), ping: () => new Promise(() => undefined) };

async function listening<S extends ReturnType<typeof createServer> | ReturnType<typeof createHttpServer>>(t: Test, s: S): Promise<number> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  t.teardown(() => s.close());
  return (s.address() as AddressInfo).port;
}

t.test('tcpSocket: a connection is a success; a refusal says so', async (t) => {
  const port = await listening(
    t,
    createServer((c) => c.end()),
  );
  t.same(await runProbe({ kind: 'tcpSocket', port }, { podIP: '127.0.0.1', guest: guest() }, 1000), { ok: true });
  const closed = await runProbe({ kind: 'tcpSocket', port: 1 }, { podIP: '127.0.0.1', guest: guest() }, 1000);
  t.same(closed, { ok: false, message: 'dial tcp 127.0.0.1:1: ECONNREFUSED' });
  t.same(await runProbe({ kind: 'tcpSocket', port }, { guest: guest() }, 1000), { ok: false, message: 'the VM has no pod address yet' });
});

t.test('httpGet: 200-399 succeed, others fail with the code; headers and the probe user agent are sent', async (t) => {
  let seen: Record<string, unknown> = {};
  const port = await listening(
    t,
    createHttpServer((req, res) => {
      seen = { path: req.url, ua: req.headers['user-agent'], x: req.headers['x-check'] };
      res.statusCode = req.url === '/bad' ? 503 : req.url === '/moved' ? 302 : 200;
      res.end();
    }),
  );
  const probe = (path: string) =>
    runProbe(
      { kind: 'httpGet', port, path, scheme: 'HTTP', headers: [{ name: 'X-Check', value: '1' }] },
      { podIP: '127.0.0.1', guest: guest() },
      1000,
    );
  t.same(await probe('/healthz'), { ok: true });
  t.same(seen, { path: '/healthz', ua: 'kube-probe/1.33', x: '1' });
  t.same(await probe('/moved'), { ok: true }, 'a redirect is a success');
  t.same(await probe('/bad'), { ok: false, message: 'HTTP probe failed with statuscode: 503' });
});

t.test('exec through the guest agent: exit 0 succeeds, else the output says why; a hung agent times out', async (t) => {
  t.same(await runProbe({ kind: 'exec', command: ['/bin/true'] }, { guest: guest(0) }, 1000), { ok: true });
  t.same(await runProbe({ kind: 'exec', command: ['/bin/check'] }, { guest: guest(1, 'not yet\n') }, 1000), {
    ok: false,
    message: 'not yet',
  });
  t.same(await runProbe({ kind: 'exec', command: ['/bin/false'] }, { guest: guest(1) }, 1000), {
    ok: false,
    message: 'command ["/bin/false"] exited with 1',
  });
  t.same(await runProbe({ kind: 'exec', command: ['/bin/true'] }, { guest: never }, 200), {
    ok: false,
    message: 'command timed out after 0.2s',
  });
});

t.test('guestAgentPing: an answer succeeds, silence past the timeout fails', async (t) => {
  t.same(await runProbe({ kind: 'guestAgentPing' }, { guest: guest() }, 1000), { ok: true });
  t.same(await runProbe({ kind: 'guestAgentPing' }, { guest: never }, 200), {
    ok: false,
    message: 'guest agent ping timed out after 0.2s',
  });
  const down: GuestAgent = { ...guest(), ping: () => Promise.reject(new Error('the guest agent is not connected')) };
  t.same(await runProbe({ kind: 'guestAgentPing' }, { guest: down }, 1000), { ok: false, message: 'the guest agent is not connected' });
});
