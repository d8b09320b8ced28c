import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeLayout } from './layout-writer.js';
import { busyboxFiles, localImages, TOOLBOX_IMAGE } from './local-images.js';

const blob = (dir: string, digest: string) => join(dir, 'blobs', 'sha256', digest.slice('sha256:'.length));
const readJson = <T>(path: string) => JSON.parse(readFileSync(path, 'utf8')) as T;

t.test('busybox: the binary once, then a link per applet to it, sorted', async (t) => {
  t.same(busyboxFiles(['usr/bin/wget', 'bin/sh', '', 'bin/busybox'], '/x/busybox'), [
    { path: 'bin/busybox', source: '/x/busybox', executable: true },
    { path: 'bin/sh', linkTo: '/bin/busybox' },
    { path: 'usr/bin/wget', linkTo: '/bin/busybox' },
  ]);
});

t.test('the toolbox layer holds root-owned busybox, executable, and its applets as links; its config runs sh', async (t) => {
  const dir = t.testdir({ busybox: '#!fake', pause: 'p', coredns: 'c' });
  const images = localImages({ pause: join(dir, 'pause'), coredns: join(dir, 'coredns') }, ['bin/sh', 'usr/bin/nc']).map((i) =>
    i.name === TOOLBOX_IMAGE ? { ...i, files: busyboxFiles(['bin/sh', 'usr/bin/nc'], join(dir, 'busybox')) } : i,
  );
  await writeLayout(join(dir, 'layout'), images);
  const index = readJson<{ manifests: Array<{ digest: string; annotations: Record<string, string> }> }>(join(dir, 'layout', 'index.json'));
  t.same(
    index.manifests.map((m) => m.annotations['io.containerd.image.name']),
    ['localhost/vkvm/pause:v1', 'localhost/vkvm/coredns:v1.12.1', TOOLBOX_IMAGE],
  );
  const manifest = readJson<{ config: { digest: string }; layers: Array<{ digest: string }> }>(
    blob(join(dir, 'layout'), index.manifests[2]!.digest),
  );
  // GNU tar as an independent reader of the layer.
  const listing = execFileSync('tar', ['-tvf', blob(join(dir, 'layout'), manifest.layers[0]!.digest), '--numeric-owner'], {
    encoding: 'utf8',
  })
    .replace(/ +\d{4}-\d\d-\d\d \d\d:\d\d /g, ' ')
    .replace(/ +/g, ' ');
  t.equal(
    listing,
    [
      'drwxr-xr-x 0/0 0 bin/',
      'drwxr-xr-x 0/0 0 usr/',
      'drwxr-xr-x 0/0 0 usr/bin/',
      '-rwxr-xr-x 0/0 6 bin/busybox',
      'lrwxrwxrwx 0/0 0 bin/sh -> /bin/busybox',
      'lrwxrwxrwx 0/0 0 usr/bin/nc -> /bin/busybox',
      '',
    ].join('\n'),
  );
  const config = readJson<{ config: unknown }>(blob(join(dir, 'layout'), manifest.config.digest));
  t.match(config.config, { Cmd: ['sh'], Env: [/^PATH=.*\/bin/] });
});
