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
import { ImageGc, planImageGc, usagePercent, type FsUsage } from './image-gc.js';
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
      remove: [
        { id: 'r/a@sha256:3', freesBytes: 1 * MiB },
        { id: 'r/b@sha256:4', freesBytes: 31 * MiB },
      ],
      freesBytes: 32 * MiB,
    },
    'the shared layer is freed once, with the second image; what is left is pinned or too young: not enough',
  );
});

/** A pid no process has: one that ran and exited. */
const deadPid = () => spawnSync('true').pid;

async function setup(t: Test) {
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
