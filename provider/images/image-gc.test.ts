// Image garbage collection as the kubelet's: the plan (thresholds, least
// recently used first, pinned and young images kept, shared parts counted
// once) as a table, then whole passes over a real store filled by real pulls,
// with a fake filesystem whose usage is the store's own size.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { LOOPBACK_PULLS, startFakeRegistry } from '../../test/helpers/fake-registry.js';
import { buildImage, tarLayer } from '../../test/helpers/oci.js';
import { createAgentMetrics } from '../metrics.js';
import { ImageGc, planImageGc, quotaLowMarkBytes, usagePercent, type FsUsage } from './image-gc.js';
import { ImageService } from './image-service.js';
import type { StoredImage } from './inventory.js';
import { readInventory } from './inventory.js';
import { PinStore } from './pins.js';
import { ImageStore } from './store.js';

const MiB = 2 ** 20;
const POLICY = { highThresholdPercent: 85, lowThresholdPercent: 80, minAgeMs: 120_000 };
const NOW = Date.UTC(2026, 10, 1);

const image = (id: string, parts: Record<string, number>, o: { lastUsedMs?: number; pulledAtMs?: number } = {}): StoredImage => ({
  id,
  names: [id],
  parts: new Map(Object.entries(parts)),
  pulledAtMs: o.pulledAtMs ?? NOW - 3_600_000,
  lastUsedMs: o.lastUsedMs ?? o.pulledAtMs ?? NOW - 3_600_000,
});

t.test('the plan: nothing below the high threshold; above it, least recently used first down to the low one', async (t) => {
  const capacity = 100 * MiB;
  const images = [
    image('r/old@sha256:1', { a: 10 * MiB }, { lastUsedMs: NOW - 7_200_000 }),
    image('r/older@sha256:2', { b: 10 * MiB }, { lastUsedMs: NOW - 9_000_000 }),
    image('r/recent@sha256:3', { c: 10 * MiB }, { lastUsedMs: NOW - 60_000 }),
  ];
  const plan = (availableBytes: number) =>
    planImageGc({ images, pinned: new Set(), usage: { capacityBytes: capacity, availableBytes }, policy: POLICY, nowMs: NOW });
  t.match(plan(16 * MiB), { usagePercent: 84, needBytes: 0, remove: [] }, '84 % full: nothing to do');
  t.match(
    plan(15 * MiB),
    { usagePercent: 85, needBytes: 5 * MiB, remove: [{ id: 'r/older@sha256:2', freesBytes: 10 * MiB }], freesBytes: 10 * MiB },
    '85 % full: down to 80 %, the least recently used image first, and no more than needed',
  );
  t.match(
    plan(5 * MiB).remove.map((r) => r.id),
    ['r/older@sha256:2', 'r/old@sha256:1'],
    '95 % full: 15 MiB to free, two images',
  );
  t.equal(usagePercent({ capacityBytes: 3, availableBytes: 1 }), 67, "the kubelet's arithmetic: 100 - floor(available·100/capacity)");
});

t.test('the plan: pinned and young images stay; a shared part counts with its last holder', async (t) => {
  const images = [
    image('r/pinned@sha256:1', { p: 50 * MiB }, { lastUsedMs: NOW - 9_000_000 }),
    image('r/young@sha256:2', { y: 50 * MiB }, { pulledAtMs: NOW - 60_000 }),
    image('r/a@sha256:3', { shared: 30 * MiB, a: 1 * MiB }, { lastUsedMs: NOW - 8_000_000 }),
    image('r/b@sha256:4', { shared: 30 * MiB, b: 1 * MiB }, { lastUsedMs: NOW - 7_000_000 }),
  ];
  const plan = planImageGc({
    images,
    pinned: new Set(['r/pinned@sha256:1']),
    usage: { capacityBytes: 200 * MiB, availableBytes: 0 },
    policy: POLICY,
    nowMs: NOW,
  });
  t.same(
    plan,
    {
      usagePercent: 100,
      needBytes: 40 * MiB,
      quotaNeedBytes: 0,
      remove: [
        { id: 'r/a@sha256:3', freesBytes: 1 * MiB },
        { id: 'r/b@sha256:4', freesBytes: 31 * MiB },
      ],
      freesBytes: 32 * MiB,
    },
    'the shared layer is freed once, with the second image; what is left is pinned or too young: not enough',
  );
});

t.test('the plan with a quota: past it, least recently used first down to its low mark; pinned and young stay', async (t) => {
  const images = [
    image('r/pinned@sha256:1', { p: 10 * MiB }, { lastUsedMs: NOW - 9_900_000 }),
    image('r/a@sha256:2', { a: 10 * MiB }, { lastUsedMs: NOW - 9_000_000 }),
    image('r/young@sha256:3', { y: 10 * MiB }, { pulledAtMs: NOW - 60_000 }),
    image('r/b@sha256:4', { b: 10 * MiB }, { lastUsedMs: NOW - 8_000_000 }),
    image('r/c@sha256:5', { c: 10 * MiB }, { lastUsedMs: NOW - 7_000_000 }),
  ];
  // A filesystem nearly empty: only the quota can ask for anything.
  const roomy = { capacityBytes: 1000 * MiB, availableBytes: 900 * MiB };
  const plan = (quotaBytes: number, heldBytes: number, usage = roomy) =>
    planImageGc({ images, pinned: new Set(['r/pinned@sha256:1']), usage, policy: POLICY, nowMs: NOW, quota: { quotaBytes, heldBytes } });
  t.equal(quotaLowMarkBytes(34 * MiB, POLICY), 32 * MiB, 'the low mark is low/high of the quota: 80/85 of 34 MiB');
  t.match(plan(34 * MiB, 50 * MiB), {
    needBytes: 18 * MiB,
    quotaNeedBytes: 18 * MiB,
    remove: [
      { id: 'r/a@sha256:2', freesBytes: 10 * MiB },
      { id: 'r/b@sha256:4', freesBytes: 10 * MiB },
    ],
    freesBytes: 20 * MiB,
  });
  t.match(plan(34 * MiB, 34 * MiB), { needBytes: 0, quotaNeedBytes: 0, remove: [] }, 'at the quota, not past it: nothing');
  t.match(plan(0, 50 * MiB), { needBytes: 0, remove: [] }, 'no quota (0): only the filesystem rule');
  t.match(
    plan(10 * MiB, 50 * MiB),
    {
      quotaNeedBytes: 50 * MiB - quotaLowMarkBytes(10 * MiB, POLICY),
      remove: [{ id: 'r/a@sha256:2' }, { id: 'r/b@sha256:4' }, { id: 'r/c@sha256:5' }],
    },
    'far past: every unpinned old image, and the pinned and the young stay',
  );
  t.match(
    plan(49 * MiB, 50 * MiB, { capacityBytes: 200 * MiB, availableBytes: 10 * MiB }),
    { usagePercent: 95, needBytes: 30 * MiB, remove: [{ id: 'r/a@sha256:2' }, { id: 'r/b@sha256:4' }, { id: 'r/c@sha256:5' }] },
    'the filesystem needs more than the quota: its need wins',
  );
});

/** A pid no process has: one that ran and exited. */
const deadPid = () => spawnSync('true').pid;

async function setup(t: Test, quotaBytes = 0) {
  const registry = await startFakeRegistry(t);
  const store = new ImageStore(join(t.testdir(), 'images'));
  await store.init();
  const images = new ImageService({
    store,
    ...LOOPBACK_PULLS,
    maxParallelPulls: 2,
    maxImageBytes: 1 << 30,
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => images.close());
  const pins = new PinStore(store.pinsDir);
  const metrics = createAgentMetrics();
  // The filesystem holds 4 MiB of other files and the store; its capacity is set per test.
  let capacityBytes = 0;
  const fsUsage = async (): Promise<FsUsage> => ({
    capacityBytes,
    availableBytes: capacityBytes - 4 * MiB - (await readInventory(store)).storeBytes,
  });
  const alive = new Set<string>();
  const now = { ms: Date.now() + 3_600_000 };
  const gc = new ImageGc({
    store,
    pins,
    alive: (uid) => alive.has(uid),
    inUse: () => images.inUse(),
    policy: POLICY,
    quotaBytes,
    periodMs: 300_000,
    fsUsage,
    metrics,
    log: pino({ level: 'silent' }),
    now: () => now.ms,
  });
  /** Pushes and pulls an image of one disk and one incompressible layer of `mib`. */
  const pulled = async (repo: string, mib: number, shared?: Buffer) => {
    const layers = [
      { tar: tarLayer([{ path: 'disk/disk.img', content: `${repo} disk` }]) },
      { tar: tarLayer([{ path: 'data/blob', content: shared ?? randomBytes(mib * MiB) }]) },
    ];
    registry.addImage(repo, 'v1', buildImage(layers));
    return images.ensure({ image: `${registry.host}/${repo}:v1`, policy: 'IfNotPresent' });
  };
  const ids = async () => (await readInventory(store)).images.map((i) => i.id.replace(/^[^/]+\//, '').replace(/@.*/, '')).sort();
  const setCapacity = (bytes: number) => void (capacityBytes = bytes);
  return { store, images, pins, metrics, gc, alive, now, pulled, ids, setCapacity };
}

t.test('a pass: pins of pods gone released, partial downloads of dead processes cleared, LRU images removed, pinned kept', async (t) => {
  const { store, images, pins, metrics, gc, alive, now, pulled, ids, setCapacity } = await setup(t);
  const running = await pulled('running', 1);
  const [disk] = await images.files(running, [{ onlyIn: '/disk' }], { disk: true });
  const released = await pulled('released', 1);
  const stale = await pulled('stale', 1);
  const young = await pulled('young', 1);
  await store.updateImage(stale.imageID, (r) => ({ ...r, lastUsedMs: now.ms - 86_400_000 }));
  await store.updateImage(young.imageID, (r) => ({ ...r, pulledAtMs: now.ms - 60_000 }));
  alive.add('uid-running');
  await pins.pin({ uid: 'uid-running', pod: 'ns/running', references: [running.reference], imageIds: [running.imageID] });
  await pins.pin({ uid: 'uid-gone', pod: 'ns/gone', references: [released.reference], imageIds: [released.imageID] });
  const partial = join(store.root, 'ingest', `abc.${deadPid()}-0123456789ab`);
  writeFileSync(partial, 'half a blob');

  // Four images of ~1 MiB and 4 MiB of other files: 8 MiB used of 9 is 89 %; down to 80 % is one image.
  setCapacity(9 * MiB);
  t.equal(await gc.runOnce(), 'freed');
  t.same(
    await ids(),
    ['released', 'running', 'young'],
    'the least recently used image went; the one just released stays, as do the young and the pinned',
  );
  t.same(
    (await pins.list()).map((p) => p.uid),
    ['uid-running'],
    'the pin of the pod gone is released',
  );
  t.notOk(existsSync(partial), "a dead process's partial download is cleared");
  t.ok(existsSync(disk!), "the pinned image's disk is still there");

  // Too small for what is pinned or young: everything else goes, and the pass says it was not enough.
  setCapacity(5 * MiB);
  gc.kick();
  await gc.stop();
  t.same(await ids(), ['running', 'young']);
  t.same(await store.blobDigests().then((d) => d.length), 2 * 4, 'only the two images left own blobs: manifest, config, two layers each');

  const values = async (name: string) => (await metrics.registry.getSingleMetric(name)!.get()).values;
  t.match(
    {
      runs: await values('vkvm_image_gc_runs_total'),
      removed: await values('vkvm_image_garbage_collected_total'),
      images: await values('vkvm_image_store_images'),
    },
    { runs: [{ labels: { result: 'insufficient' }, value: 1 }], removed: [{ value: 2 }], images: [{ value: 2 }] },
    'metrics: the pass the loop ran and its result, images removed, images left',
  );
  t.ok((await values('vkvm_image_store_bytes'))[0]!.value > 2 * MiB, 'the store size is reported');
});

t.test('an image the store pins (the test guest) is never collected, however old and however full the disk', async (t) => {
  const { store, gc, now, pulled, ids, setCapacity } = await setup(t);
  const guest = await pulled('guest', 1);
  await pulled('other', 1);
  await store.updateImage(guest.imageID, (r) => ({ ...r, pinned: true, lastUsedMs: now.ms - 86_400_000 }));
  setCapacity(5 * MiB);
  t.equal(await gc.runOnce(), 'insufficient', 'what is left is not enough, and the pass says so');
  t.same(await ids(), ['guest'], 'the unpinned image went, the pinned one stayed though least recently used');
});

t.test('shared layers: removing one of two images that share a large layer frees little, the second frees it', async (t) => {
  const { store, gc, now, pulled, ids, setCapacity } = await setup(t);
  const shared = randomBytes(2 * MiB);
  const first = await pulled('first', 0, shared);
  const second = await pulled('second', 0, shared);
  await store.updateImage(first.imageID, (r) => ({ ...r, lastUsedMs: now.ms - 2_000 }));
  await store.updateImage(second.imageID, (r) => ({ ...r, lastUsedMs: now.ms - 1_000 }));
  // 2 MiB shared + 4 MiB other of 7: 86 %; 80 % needs both gone, since the first alone frees only its own small blobs.
  setCapacity(7 * MiB);
  t.equal(await gc.runOnce(), 'freed');
  t.same(await ids(), []);
});

t.test(
  'a quota on a roomy filesystem: past it, a pass removes the least recently used unpinned images and reports what stays over',
  async (t) => {
    const { store, pins, metrics, gc, alive, now, pulled, ids, setCapacity } = await setup(t, 3 * MiB);
    setCapacity(1000 * MiB);
    const pinned = await pulled('pinned', 1);
    const old = await pulled('old', 1);
    const older = await pulled('older', 1);
    await store.updateImage(pinned.imageID, (r) => ({ ...r, lastUsedMs: now.ms - 90_000_000 }));
    await store.updateImage(old.imageID, (r) => ({ ...r, lastUsedMs: now.ms - 86_400_000 }));
    await store.updateImage(older.imageID, (r) => ({ ...r, lastUsedMs: now.ms - 88_000_000 }));
    alive.add('uid-pinned');
    await pins.pin({ uid: 'uid-pinned', pod: 'ns/pinned', references: [pinned.reference], imageIds: [pinned.imageID] });
    const excess = async () => (await metrics.imageQuotaExcessBytes.get()).values.find((v) => v.labels.cache === 'image-store')?.value;

    // Three images of ~1 MiB: past 3 MiB; down to 80/85 of it (~2.8 MiB) is one image, the older unpinned one.
    t.equal(await gc.runOnce(), 'freed');
    t.same(await ids(), ['old', 'pinned']);
    t.equal(await excess(), 0, 'within the quota again');
    t.equal(await gc.runOnce(), 'below-threshold', 'within the quota: nothing more goes');
    t.same(await ids(), ['old', 'pinned']);

    // A young pull past the quota: the old one goes; the young and the pinned stay over it, and say so.
    const young = await pulled('young', 2);
    await store.updateImage(young.imageID, (r) => ({ ...r, pulledAtMs: now.ms - 60_000 }));
    t.equal(await gc.runOnce(), 'insufficient');
    t.same(await ids(), ['pinned', 'young']);
    t.ok((await excess())! > 0, 'what could not be freed is in vkvm_image_quota_excess_bytes');
    t.ok(young.imageID, 'the pull itself was not refused');
  },
);
