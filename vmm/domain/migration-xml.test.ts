// The incoming domain's XML: only host paths change (each disk's cache and io modes stay the source's), the
// backing chain is left for the target to probe, and a path the target did not give is an error naming it. Golden:
// testdata/migration/target.xml (VKVM_UPDATE_GOLDEN=1 regenerates it; read the diff).
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { disksToCopy, MigrationXmlError, toTargetXml, type IncomingPaths } from './migration-xml.js';

const file = (name: string): string => fileURLToPath(new URL(`testdata/migration/${name}.xml`, import.meta.url));
const source = await readFile(file('source'), 'utf8');
const T = '/var/lib/vkvm/vms/target';
const paths: IncomingPaths = {
  diskPaths: { root: `${T}/disks/root.qcow2`, data: `${T}/disks/data.qcow2`, cloudinit: `${T}/disks/cloudinit.iso` },
  consoleSocket: `${T}/qemu/console.sock`,
  agentSocket: `${T}/qemu/agent.sock`,
  vncSocket: `${T}/qemu/vnc.sock`,
  nvramPath: '',
  bootPaths: { kernel: '/node-b/cache/vmlinux', initrd: '/node-b/cache/initrd.img' },
};

t.test('toTargetXml rewrites disk, socket and boot paths and drops the backing chain (golden)', async (t) => {
  const xml = toTargetXml(source, paths);
  if (process.env.VKVM_UPDATE_GOLDEN === '1') await writeFile(file('target'), xml);
  t.equal(xml, await readFile(file('target'), 'utf8'), 'matches testdata/migration/target.xml');
  t.notMatch(xml, /0b6a3c1e|backingStore|\/var\/cache\/vkvm\/guest/, 'no source path and no backing chain is left');
  const lines = (x: string): string[] =>
    x.split('\n').filter((l) => !/(file|path|socket)='|<(kernel|initrd)>|backingStore|<format /.test(l));
  t.same(lines(xml), lines(source), 'every other line is the source’s, in order (the ABI stays)');
  t.match(
    xml,
    /<iothreads>2<\/iothreads>[\s\S]*iothread='1'\/>[\s\S]*iothread='2'\/>/,
    'the target keeps the source’s iothreads and each disk’s thread',
  );
});

t.test('a path the source domain needs but the target did not give is an error naming the field', async (t) => {
  const cases: [Partial<IncomingPaths>, string][] = [
    [{ diskPaths: { root: 'x', cloudinit: 'y' } }, 'diskPaths.data'],
    [{ agentSocket: '' }, 'agentSocket'],
    [{ vncSocket: '' }, 'vncSocket'],
    [{ bootPaths: { kernel: 'k' } }, 'bootPaths.initrd'],
  ];
  t.same(
    cases.map(([change]) => {
      try {
        toTargetXml(source, { ...paths, ...change });
        return 'no error';
      } catch (err) {
        return err instanceof MigrationXmlError ? err.field : String(err);
      }
    }),
    cases.map(([, field]) => field),
  );
});

t.test('the disks to copy are the writable file disks, by target dev', async (t) => {
  t.same(disksToCopy(source), ['vda', 'vdb'], 'the overlay and the empty disk; not the read-only seed');
});
