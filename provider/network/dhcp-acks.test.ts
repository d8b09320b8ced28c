// The lease script as dnsmasq runs it (an action and the MAC and address as
// arguments, the exchange in DNSMASQ_* variables), and the records it leaves.
import { execFile } from 'node:child_process';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import t from 'tap';
import { DhcpAcks } from './dhcp-acks.js';

const exec = promisify(execFile);
const UID = '6f1c2a9e-0b7d-4c55-9e51-2f3c1d0a8b7e';

t.test('the lease script records a DHCP exchange with a VM guest by its uid, and nothing else', async (t) => {
  const dir = t.testdir();
  const acks = new DhcpAcks(path.join(dir, 'acks'), dir, pino({ level: 'silent' }));
  await acks.ensure();
  t.teardown(() => acks.close());
  const event = async (args: string[], env: Record<string, string>) => {
    const { stdout } = await exec(acks.script, args, { env: { PATH: '/usr/bin:/bin', ...env } });
    return stdout;
  };
  const exchange = { DNSMASQ_TAGS: `vm-${UID} known vkvm0`, DNSMASQ_INTERFACE: 'vkvm0' };

  t.equal(await event(['init'], {}), '', 'init (leasefile-ro) gives dnsmasq no leases to restore');
  await event(['old', '52:54:00:aa:bb:01', '10.244.0.5'], { DNSMASQ_DATA_MISSING: '1', DNSMASQ_INTERFACE: 'vkvm0' });
  await event(['del', '52:54:00:aa:bb:01', '10.244.0.5'], exchange);
  await event(['add', '52:54:00:aa:bb:01', '10.244.0.5'], { DNSMASQ_TAGS: 'known vkvm0' });
  await event(['add', '52:54:00:aa:bb:01', '10.244.0.5'], { DNSMASQ_TAGS: 'vm-../../etc known' });
  await event(['add', '52:54:00:aa:bb:01', '10.244.0.5'], { DNSMASQ_TAGS: 'vm-* known' });
  t.same(await readdir(path.join(dir, 'acks')), [], "a reload's old lease, an expiry, an untagged or ill-named exchange: no record");
  t.equal(await acks.ackedAtUnixMs(UID), undefined, 'no answer yet');

  const before = Date.now();
  await event(['add', '52:54:00:aa:bb:01', '10.244.0.5'], exchange);
  const first = await acks.ackedAtUnixMs(UID);
  t.ok(first !== undefined && first >= before - 10, 'an ACK of a new lease is recorded');
  await new Promise((r) => setTimeout(r, 20));
  await event(['old', '52:54:00:aa:bb:01', '10.244.0.5'], exchange);
  const renewed = await acks.ackedAtUnixMs(UID);
  t.ok(renewed !== undefined && first !== undefined && renewed > first, 'a renewal, or a restarted guest asking again, moves it on');
  t.same(
    { records: await acks.recorded(), mode: ((await stat(path.join(dir, 'acks', UID))).mode & 0o777).toString(8) },
    { records: [UID], mode: '600' },
    'one private record per VM',
  );
  await acks.forget(UID);
  t.same(await acks.recorded(), [], 'forgotten with the VM');
});
