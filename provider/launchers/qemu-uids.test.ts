import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { QEMU_UID_BASE, QEMU_UID_COUNT, QemuUids } from './qemu-uids.js';

t.test('each VM gets its own uid, kept across agent restarts and freed with its directory', async (t) => {
  const vms = t.testdir({ a: {}, b: {}, c: {}, d: {} });
  const pool = new QemuUids(vms);
  await pool.load();
  const [a, b] = await Promise.all([pool.take('a'), pool.take('b')]);
  t.same([a, b], [QEMU_UID_BASE, QEMU_UID_BASE + 1], 'concurrent takes get different uids');
  t.equal(readFileSync(join(vms, 'a', 'qemu-uid'), 'utf8'), `${QEMU_UID_BASE}\n`, 'recorded in the VM directory');

  const restarted = new QemuUids(vms);
  await restarted.load();
  t.same([restarted.of('a'), restarted.of('c')], [QEMU_UID_BASE, undefined], 'known once loaded, before any take');
  t.same(
    [await restarted.take('b'), await restarted.take('c')],
    [QEMU_UID_BASE + 1, QEMU_UID_BASE + 2],
    'a restarted agent keeps what directories record',
  );
  restarted.release('a');
  t.equal(await restarted.take('d'), QEMU_UID_BASE, 'a removed VM frees its uid for the next');
});

t.test('a record that is not a vkvm uid is ignored', async (t) => {
  const vms = t.testdir({ x: { 'qemu-uid': '0\n' }, y: { 'qemu-uid': 'root' } });
  mkdirSync(join(vms, 'z'));
  writeFileSync(join(vms, 'z', 'qemu-uid'), `${QEMU_UID_BASE + 5}\n`);
  const pool = new QemuUids(vms);
  await pool.load();
  t.same([await pool.take('x'), await pool.take('z')], [QEMU_UID_BASE, QEMU_UID_BASE + 5], 'x gets a fresh uid, never root');
});

t.test("a node's base keeps its uids apart from another node's on the same machine", async (t) => {
  const base = QEMU_UID_BASE + QEMU_UID_COUNT;
  const vms = t.testdir({ a: {}, b: { 'qemu-uid': `${QEMU_UID_BASE}\n` } });
  const pool = new QemuUids(vms, base);
  await pool.load();
  t.same(
    [await pool.take('a'), await pool.take('b')],
    [base, base + 1],
    "uids from its own range; another range's record is not taken over",
  );
});
