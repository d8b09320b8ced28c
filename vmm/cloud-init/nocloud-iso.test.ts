import t from 'tap';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { buildNoCloudIso } from './nocloud-iso.js';
import { run } from '../exec.js';

// isoinfo ships with genisoimage; -R reads the Rock Ridge names cloud-init sees.
const volumeId = async (iso: string) => /Volume id: (\S+)/.exec(await run('isoinfo', ['-d', '-i', iso]))?.[1];
const files = async (iso: string) => (await run('isoinfo', ['-R', '-f', '-i', iso])).trim().split('\n').sort();
const fileText = (iso: string, name: string) => run('isoinfo', ['-R', '-x', name, '-i', iso]);

t.test('a cidata volume with user-data, meta-data and network-config, and no staging left', async (t) => {
  const dir = t.testdir();
  const iso = join(dir, 'seed.iso');
  await buildNoCloudIso({ userData: '#cloud-config\nhostname: vm1\n', metaData: 'instance-id: vm1\n', networkConfig: 'version: 2\n' }, iso);
  t.same(
    {
      volumeId: await volumeId(iso),
      files: await files(iso),
      userData: await fileText(iso, '/user-data'),
      metaData: await fileText(iso, '/meta-data'),
      dir: await readdir(dir),
    },
    {
      volumeId: 'cidata',
      files: ['/meta-data', '/network-config', '/user-data'],
      userData: '#cloud-config\nhostname: vm1\n',
      metaData: 'instance-id: vm1\n',
      dir: ['seed.iso'],
    },
  );
});

t.test('no network-config file unless the seed has one', async (t) => {
  const iso = join(t.testdir(), 'seed.iso');
  await buildNoCloudIso({ userData: '', metaData: '' }, iso);
  t.same(await files(iso), ['/meta-data', '/user-data']);
});

t.test('a failed build leaves no staging files behind', async (t) => {
  // The target is a non-empty directory, so the final rename fails after genisoimage ran.
  const dir = t.testdir({ 'seed.iso': { 'keep.txt': 'x' } });
  await t.rejects(buildNoCloudIso({ userData: '', metaData: '' }, join(dir, 'seed.iso')), { code: /^(EISDIR|ENOTEMPTY|EEXIST)$/ });
  t.same(await readdir(dir), ['seed.iso']);
});
