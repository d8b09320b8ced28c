import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import type { VolumeRecord } from './records.js';
import { Store } from './store.js';

const volume = (id: string, name: string): VolumeRecord => ({
  id,
  name,
  sizeBytes: 1 << 20,
  mode: 'block',
  createdAtMs: 1,
  node: { phase: 'unstaged' },
});

t.test('Store: records written whole survive a reopen; concurrent changes all land', async (t) => {
  const dir = t.testdir();
  const store = await Store.open(dir);
  await Promise.all([
    store.putVolume(volume('vol-a', 'a')),
    store.putVolume(volume('vol-b', 'b')),
    store.putSnapshot({ id: 'snap-a', name: 's', sourceVolumeId: 'vol-a', mode: 'block', sizeBytes: 1 << 20, createdAtMs: 2 }),
  ]);
  await store.deleteVolume('vol-b');
  const reopened = await Store.open(dir);
  t.same(
    {
      volumes: [...reopened.volumes.keys()],
      snapshots: [...reopened.snapshots.keys()],
      byName: reopened.volumeByName('a')?.id,
      file: reopened.volumeFile('vol-a'),
      mode: ((await import('node:fs')).statSync(join(dir, 'state.json')).mode & 0o777).toString(8),
    },
    { volumes: ['vol-a'], snapshots: ['snap-a'], byName: 'vol-a', file: join(dir, 'volumes', 'vol-a.img'), mode: '600' },
  );
});

t.test('Store refuses records of another version rather than misread them', async (t) => {
  const dir = t.testdir();
  await Store.open(dir);
  await writeFile(join(dir, 'state.json'), JSON.stringify({ version: 2, volumes: [], snapshots: [] }));
  await t.rejects(Store.open(dir), /state version 2, this driver reads 1/);
  t.match(await readFile(join(dir, 'state.json'), 'utf8'), /"version":2/, 'and leaves them as they are');
});
