// `vkvm images rm` on a store an agent uses: an image a pod on the node holds
// is refused with a message naming the pod, and goes once the pod is gone.
import { join } from 'node:path';
import t from 'tap';
import { buildImage, tarLayer, writeTestImagesToLayout } from '../../test/helpers/oci.js';
import { importLayout } from '../images/oci-layout.js';
import { PinStore } from '../images/pins.js';
import { ImageStore } from '../images/store.js';
import { imagesCommand } from './images.js';

t.test('rm refuses an image a pod on this node uses, naming the pod; removes it once the pin is gone', async (t) => {
  const dir = t.testdir();
  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  const layout = join(dir, 'layout');
  const disk = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'disk' }]) }]);
  writeTestImagesToLayout(layout, [{ image: disk, annotations: { 'io.containerd.image.name': 'localhost/vkvm/disk:v1' } }]);
  await importLayout(layout, store, { maxImageBytes: 1 << 30 });
  const pins = new PinStore(store.pinsDir);
  await pins.pin({ uid: 'u1', pod: 'team-a/vm', references: ['localhost/vkvm/disk:v1'], imageIds: [] });

  const run = async (...argv: string[]) => {
    const stdout = t.capture(process.stdout, 'write', () => true);
    const stderr = t.capture(process.stderr, 'write', () => true);
    const code = await imagesCommand([...argv, `--image-store-dir=${store.root}`]).finally(() => {
      stdout.restore();
      stderr.restore();
    });
    const text = (calls: ReturnType<typeof stdout>) => calls.map((c) => String(c.args[0])).join('');
    return { code, stdout: text(stdout()), stderr: text(stderr()) };
  };
  t.same(
    await run('rm', `localhost/vkvm/disk@${disk.manifest.digest}`),
    {
      code: 1,
      stdout: '',
      stderr: `vkvm: localhost/vkvm/disk@${disk.manifest.digest} is in use by pod team-a/vm on this node; it is kept until that pod is gone\n`,
    },
    'refused by digest, as the pod named it by tag',
  );
  t.ok(await store.record('localhost/vkvm/disk:v1'), 'the image is still there');
  await pins.unpin('u1');
  t.match(await run('rm', 'localhost/vkvm/disk:v1'), { code: 0, stdout: /^deleted localhost\/vkvm\/disk:v1\n/, stderr: '' });
  t.same(await store.records(), []);
});
