// The test guest (vmm/guest/) as two ordinary images in the node's
// image store, so `vkvm up`, the examples and the tests run it on a machine
// without internet access:
//   localhost/vkvm/test-guest:v1         a containerDisk: the bootable disk (MBR,
//                                        syslinux, systemd-boot) at /disk/disk.img
//   localhost/vkvm/test-guest-kernel:v1  a kernel-boot image for kernelBoot.container:
//                                        /boot/vmlinuz and /boot/initrd.img
// "localhost/" is how podman names local images. The images are written as
// an OCI layout beside the guest they come from (cached like it) and loaded
// by importLayout, the path `vkvm images import` takes, so they are
// preloaded images: every pod may use them, and no registry is asked.
//
// The tag names the images' layout (the paths above), not a build: the bytes
// come from this host's Debian packages, and a new build re-points the tag.
// It is not `latest` because Kubernetes (and KubeVirt, for containerDisks)
// default `latest` to imagePullPolicy Always, which would send every pod to a
// registry at "localhost" that does not exist; any other tag defaults to
// IfNotPresent, which the store answers.
import { createHash } from 'node:crypto';
import { access, readdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ensureTestGuestDisk } from '../../vmm/guest/boot-disk.js';
import { ensureTestGuest, type EnsureTestGuestOptions } from '../../vmm/guest/build.js';
import { newBuildDir, publishEntry } from '../../vmm/guest/cache-entry.js';
import { DEFAULT_GUEST_CACHE_DIR } from '../../vmm/guest/recipe.js';
import { ImageContentError } from './errors.js';
import { writeLayout, type LayoutImage } from './layout-writer.js';
import { importLayout } from './oci-layout.js';
import { ImageStore, type ImageRecord } from './store.js';

export const TEST_GUEST_IMAGE = 'localhost/vkvm/test-guest:v1';
export const TEST_GUEST_KERNEL_IMAGE = 'localhost/vkvm/test-guest-kernel:v1';
/** Where the kernel-boot image holds its files: kernelBoot.container's kernelPath and initrdPath. */
export const TEST_GUEST_KERNEL_PATH = '/boot/vmlinuz';
export const TEST_GUEST_INITRD_PATH = '/boot/initrd.img';

/** Bump when the images' layout changes in a way the guest's cache keys would miss. */
const LAYOUT_VERSION = 1;

/** The two images' files, from the guest's cache entries. */
async function testGuestImages(opts: EnsureTestGuestOptions): Promise<LayoutImage[]> {
  const disk = await ensureTestGuestDisk(opts);
  // The bzImage the disk holds too (one build for both), as kernel-boot images ship: the PVH vmlinux boots
  // ~4-5 s sooner under TCG but is 8 times larger (~65 MiB), in every node's store.
  const guest = await ensureTestGuest({ ...opts, pvh: false });
  return [
    { name: TEST_GUEST_IMAGE, files: [{ path: 'disk/disk.img', source: disk.path }] },
    {
      name: TEST_GUEST_KERNEL_IMAGE,
      files: [
        { path: TEST_GUEST_KERNEL_PATH.slice(1), source: guest.kernelPath },
        { path: TEST_GUEST_INITRD_PATH.slice(1), source: guest.initrdPath },
      ],
    },
  ];
}

const isLayout = (dir: string) =>
  access(join(dir, 'oci-layout')).then(
    () => true,
    () => false,
  );

/**
 * The layout of `images` in `cacheDir`, written on first use; layouts of earlier builds are removed. The images'
 * source paths key it, so they must name their content (cache entries named by content keys), or `contentKey` must.
 */
export async function ensureLayout(cacheDir: string, images: LayoutImage[], contentKey = ''): Promise<string> {
  const key = createHash('sha256').update(JSON.stringify({ LAYOUT_VERSION, images, contentKey })).digest('hex').slice(0, 32);
  const dir = join(cacheDir, `oci-${key}`);
  if (!(await isLayout(dir))) {
    const tmp = await newBuildDir(cacheDir, `oci-${key}`);
    try {
      await writeLayout(tmp, images);
      await publishEntry(tmp, dir, isLayout);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }
  // A new kernel or initramfs makes a new layout: the old one's bytes are in the store if still used.
  for (const name of await readdir(cacheDir)) {
    if (name.startsWith('oci-') && name !== `oci-${key}`) await rm(join(cacheDir, name), { recursive: true, force: true });
  }
  return dir;
}

/**
 * Imports `images` into `store` through an OCI layout cached in `cacheDir`
 * (written on first use, and again if damaged since), pinned against image
 * garbage collection as the kubelet's pause image is.
 */
export async function importCachedLayout(store: ImageStore, cacheDir: string, images: LayoutImage[]): Promise<ImageRecord[]> {
  // Our own build: no size cap beyond the disk's.
  const importOpts = { maxImageBytes: Number.MAX_SAFE_INTEGER, pinned: true };
  const dir = await ensureLayout(cacheDir, images);
  try {
    return await importLayout(dir, store, importOpts);
  } catch (err) {
    if (!(err instanceof ImageContentError)) throw err;
    // Damaged since it was written (a crash before its blobs reached the disk, a full disk): written again, once.
    await rm(dir, { recursive: true, force: true });
    return importLayout(await ensureLayout(cacheDir, images), store, importOpts);
  }
}

/** Builds the test guest's images (on first use; cached with the guest) and imports them into `store`; returns what was recorded. */
export const publishTestGuest = async (store: ImageStore, opts: EnsureTestGuestOptions = {}): Promise<ImageRecord[]> =>
  importCachedLayout(store, resolve(opts.cacheDir ?? DEFAULT_GUEST_CACHE_DIR), await testGuestImages(opts));

/** publishTestGuest into the store at `storeDir`, as `vkvm up` and the test fixtures want it. */
export async function importTestGuest(storeDir: string, opts: EnsureTestGuestOptions = {}): Promise<ImageRecord[]> {
  const store = new ImageStore(storeDir);
  await store.init();
  return publishTestGuest(store, opts);
}
