// The host command helpers: ip -batch input as a pure function, then on the
// real host — a batch that builds, a removal that tolerates what is gone but
// not other failures, and a link read from sysfs as `ip` lists it.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { hostLink, ipBatch, ipBatchRemoval, links, renderIpBatch, run } from './host.js';

t.test('an ip batch is one command per line; an argument it cannot carry is refused', async (t) => {
  t.equal(
    renderIpBatch([
      ['link', 'add', 'vh0', 'type', 'veth', 'peer', 'name', 'eth0'],
      ['link', 'set', 'vh0', 'up'],
    ]),
    'link add vh0 type veth peer name eth0\nlink set vh0 up\n',
  );
  for (const bad of ['two words', 'a"quote', "it's", 'back\\slash', '#comment', '', 'new\nline']) {
    t.throws(() => renderIpBatch([['link', 'set', bad, 'up']]), /ip -batch cannot carry the argument/, `refused: ${JSON.stringify(bad)}`);
  }
});

t.test('on the host: a batch builds in order, a removal ignores only what is gone', async (t) => {
  const suffix = randomBytes(3).toString('hex');
  const [a, b] = [`vkha${suffix}`, `vkhb${suffix}`];
  t.teardown(() =>
    ipBatchRemoval(
      [
        ['link', 'del', a],
        ['link', 'del', b],
      ],
      /Cannot find device/,
    ),
  );

  await ipBatch([
    ['link', 'add', a, 'type', 'bridge'],
    ['link', 'add', b, 'type', 'veth', 'peer', 'name', `vkhp${suffix}`],
    ['link', 'set', b, 'master', a],
    ['link', 'set', b, 'up'],
  ]);
  const all = await links();
  t.match(
    { a: await hostLink(a), b: await hostLink(b), absent: await hostLink(`vkhc${suffix}`) },
    { a: { ifname: a, operstate: all.get(a)!.operstate, address: all.get(a)!.address }, b: { ifname: b, master: a }, absent: undefined },
    'sysfs tells what ip lists: the bridge, its port and its master; nothing for a missing link',
  );
  t.equal((await hostLink(b))?.operstate, all.get(b)?.operstate, 'and the same operstate');

  const failed = await ipBatch([
    ['link', 'set', b, 'nomaster'],
    ['link', 'set', `vkhc${suffix}`, 'up'],
    ['link', 'del', b],
  ]).catch((err: unknown) => err);
  t.match(failed, { kind: 'HostCommand', stderr: /Cannot find device "vkhc/ }, 'a batch stops at its first failure, named in the error');
  t.ok(await hostLink(b), 'the commands after it did not run');

  await ipBatchRemoval(
    [
      ['link', 'del', b],
      ['link', 'del', `vkhc${suffix}`],
      ['link', 'del', a],
    ],
    /Cannot find device/,
  );
  t.same([await hostLink(a), await hostLink(b)], [undefined, undefined], 'a removal goes on past what is already gone');
  await t.rejects(
    ipBatchRemoval([['link', 'add', a, 'type', 'no-such-kind']], /Cannot find device/),
    { message: /^ip -force -batch - failed \(1\): Error: Unknown device type/ },
    'and throws on any other failure',
  );
  t.notOk((await run(['ip', '-j', 'link', 'show'])).includes(suffix), 'nothing of the test is left');
});
