import { readFileSync } from 'node:fs';
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
    first.map((r) => r.reference),
    [TEST_GUEST_IMAGE, TEST_GUEST_KERNEL_IMAGE],
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
