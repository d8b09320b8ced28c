import { readdirSync, readFileSync, statSync, truncateSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { LOOPBACK_PULLS } from '../../test/helpers/fake-registry.js';
import { ensureTestGuestDisk } from '../../vmm/guest/boot-disk.js';
import { ensureTestGuest } from '../../vmm/guest/build.js';
import { ImageService } from './image-service.js';
import { defaultPullPolicy } from './reference.js';
import { ImageStore } from './store.js';
import {
  importCachedLayout,
  publishTestGuest,
  TEST_GUEST_IMAGE,
  TEST_GUEST_INITRD_PATH,
  TEST_GUEST_KERNEL_IMAGE,
  TEST_GUEST_KERNEL_PATH,
} from './test-guest-images.js';

t.test('the test guest is published into a store as a containerDisk and a kernel-boot image, used with no registry', async (t) => {
  const store = new ImageStore(join(t.testdir(), 'store'));
  await store.init();
  const first = await publishTestGuest(store);
  const again = await publishTestGuest(store);
  t.same(
    first.map((r) => [r.reference, r.pinned]),
    [
      [TEST_GUEST_IMAGE, true],
      [TEST_GUEST_KERNEL_IMAGE, true],
    ],
    'both images, pinned against garbage collection',
  );
  t.same(
    again.map((r) => r.digest),
    first.map((r) => r.digest),
    'publishing again names the same content',
  );
  t.same(
    [TEST_GUEST_IMAGE, TEST_GUEST_KERNEL_IMAGE].map(defaultPullPolicy),
    ['IfNotPresent', 'IfNotPresent'],
    'not latest: the default policy takes them from the store, never from a registry at "localhost"',
  );

  const images = new ImageService({
    store,
    ...LOOPBACK_PULLS,
    maxParallelPulls: 1,
    maxImageBytes: 1 << 30,
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => images.close());
  const [disk] = await images.files(await images.ensure({ image: TEST_GUEST_IMAGE, policy: 'IfNotPresent' }), [{ onlyIn: '/disk' }], {
    disk: true,
  });
  const [kernel, initrd] = await images.files(
    await images.ensure({ image: TEST_GUEST_KERNEL_IMAGE, policy: 'IfNotPresent' }),
    [{ path: TEST_GUEST_KERNEL_PATH }, { path: TEST_GUEST_INITRD_PATH }],
    { disk: false },
  );
  const guest = await ensureTestGuest({ pvh: false });
  t.ok(readFileSync(disk!).equals(readFileSync((await ensureTestGuestDisk()).path)), 'the containerDisk holds the bootable disk');
  t.ok(
    readFileSync(kernel!).equals(readFileSync(guest.kernelPath)) && readFileSync(initrd!).equals(readFileSync(guest.initrdPath)),
    "the kernel-boot image holds the guest's kernel and initramfs",
  );
});

t.test('the cached layout: imported pinned; written again when damaged; an earlier build removed', async (t) => {
  const dir = t.testdir({ disk: 'disk v1', disk2: 'disk v2' });
  const cache = join(dir, 'cache');
  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  const image = (source: string) => [{ name: 'localhost/x/disk:v1', files: [{ path: 'disk/disk.img', source: join(dir, source) }] }];
  const [first] = await importCachedLayout(store, cache, image('disk'));
  t.match(first, { reference: 'localhost/x/disk:v1', pinned: true }, 'recorded pinned');
  const [layout] = readdirSync(cache).filter((n) => n.startsWith('oci-'));
  const blobs = join(cache, layout!, 'blobs', 'sha256');
  // A layer truncated by a crash: its bytes no longer match its digest.
  for (const b of readdirSync(blobs)) if (statSync(join(blobs, b)).size > 1024) truncateSync(join(blobs, b), 10);
  await rm(store.root, { recursive: true });
  await store.init();
  t.match(
    await importCachedLayout(store, cache, image('disk')),
    [{ digest: first!.digest, pinned: true }],
    'the damaged layout written again',
  );
  await importCachedLayout(store, cache, image('disk2'));
  t.equal(readdirSync(cache).filter((n) => n.startsWith('oci-')).length, 1, "a new build's layout replaced the old one");
});
