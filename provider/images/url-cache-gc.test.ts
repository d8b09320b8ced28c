// The URL image cache's garbage collection over real files and a fake
// filesystem size: partial downloads of processes gone go first, then the least
// recently used entries until the low threshold; pinned and young ones stay.
// With a quota: the same order down to its low mark, and a new URL refused
// while what cannot go still fills it.
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { createAgentMetrics } from '../metrics.js';
import { testSpec } from '../../vmm/testing/specs.js';
import { imageCachePath } from '../../vmm/disks/image-cache.js';
import { ImagePullError } from './errors.js';
import { UrlCacheGc, UrlImagesInUse } from './url-cache-gc.js';

const MiB = 2 ** 20;
const POLICY = { highThresholdPercent: 85, lowThresholdPercent: 80, minAgeMs: 120_000 };
const NOW = Date.parse('2026-01-01T12:00:00Z');
const DEAD_PID = 4_000_000;

const urlSpec = (url: string) => testSpec({ disks: [{ name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'url', url } }] });

async function diskBytes(dir: string): Promise<number> {
  let sum = 0;
  for (const name of await readdir(dir)) sum += (await stat(join(dir, name))).blocks * 512;
  return sum;
}

t.test('partials of dead processes, then least recently used entries; pinned, young and live partials stay', async (t) => {
  const dir = join(t.testdir(), 'cache');
  await mkdir(dir);
  const url = (name: string) => `https://images.example/${name}.qcow2`;
  // Last used this many minutes ago.
  const ages = { running: 600, deletedPod: 500, older: 400, recent: 10, young: 1 };
  for (const [name, minutes] of Object.entries(ages)) {
    const path = imageCachePath(dir, url(name));
    await writeFile(path, randomBytes(300_000));
    const at = new Date(NOW - minutes * 60_000);
    await utimes(path, at, at);
  }
  const deadPartial = `${imageCachePath(dir, url('dead'))}.${DEAD_PID}-0a1b2c3d.part`;
  const livePartial = `${imageCachePath(dir, url('live'))}.${process.pid}-0a1b2c3d.part`;
  await writeFile(deadPartial, randomBytes(100_000));
  await writeFile(livePartial, randomBytes(100_000));

  const inUse = new UrlImagesInUse();
  inUse.note('uid-running', urlSpec(url('running')));
  inUse.note('uid-deleted', urlSpec(url('deletedPod')));
  const alive = new Set(['uid-running']);
  // 10 MiB, of which the entries leave 1.5 MiB free once the dead partial is gone: 85 % used, and
  // 0.5 MiB must go to reach 80 %: two 300 kB entries.
  const capacityBytes = 10 * MiB;
  const otherBytes = capacityBytes - 1.5 * MiB - ((await diskBytes(dir)) - (await stat(deadPartial)).blocks * 512);
  const metrics = createAgentMetrics();
  const gc = new UrlCacheGc({
    dir,
    inUse: () => inUse.cachePaths(dir, (uid) => alive.has(uid)),
    policy: POLICY,
    periodMs: 300_000,
    fsUsage: async () => ({ capacityBytes, availableBytes: capacityBytes - otherBytes - (await diskBytes(dir)) }),
    processAlive: (pid) => pid !== DEAD_PID,
    metrics,
    log: pino({ level: 'silent' }),
    now: () => NOW,
  });
  const first = await gc.runOnce();
  const names = new Map(Object.keys(ages).map((n) => [imageCachePath(dir, url(n)).slice(dir.length + 1), n]));
  const left = async () => (await readdir(dir)).map((n) => names.get(n) ?? (n.includes(String(process.pid)) ? 'live partial' : n)).sort();
  const afterFirst = await left();
  const runningUsed = (await stat(imageCachePath(dir, url('running')))).mtimeMs;
  const second = await gc.runOnce();
  t.same(
    {
      first,
      afterFirst,
      runningUsed,
      second,
      removed: (await metrics.imageCacheGarbageCollected.get()).values[0]?.value,
      entries: (await metrics.imageCacheEntries.get()).values[0]?.value,
    },
    {
      first: 'freed',
      // deletedPod's pod is gone: its pin went with it, and it was the least recently used.
      afterFirst: ['live partial', 'recent', 'running', 'young'],
      // In use at the pass: that was its last use.
      runningUsed: NOW,
      second: 'below-threshold',
      removed: 2,
      entries: 3,
    },
  );
});

t.test(
  'a quota: past it, least recently used entries go to its low mark; a new URL is refused while pinned and young ones fill it',
  async (t) => {
    const dir = join(t.testdir(), 'cache');
    await mkdir(dir);
    const url = (name: string) => `https://images.example/${name}.qcow2`;
    const age = async (name: string, minutes: number) => {
      const path = imageCachePath(dir, url(name));
      await writeFile(path, randomBytes(300_000));
      const at = new Date(NOW - minutes * 60_000);
      await utimes(path, at, at);
    };
    for (const [name, minutes] of Object.entries({ running: 900, older: 600, old: 500, young: 1 })) await age(name, minutes);
    const entryBytes = (await stat(imageCachePath(dir, url('running')))).blocks * 512;
    const inUse = new UrlImagesInUse();
    inUse.note('uid-running', urlSpec(url('running')));
    const metrics = createAgentMetrics();
    const collector = (quotaBytes: number) =>
      new UrlCacheGc({
        dir,
        inUse: () => inUse.cachePaths(dir, () => true),
        policy: POLICY,
        quotaBytes,
        periodMs: 300_000,
        // A roomy filesystem: only the quota asks for anything.
        fsUsage: async () => ({ capacityBytes: 1000 * MiB, availableBytes: 900 * MiB }),
        metrics,
        log: pino({ level: 'silent' }),
        now: () => NOW,
      });
    const left = async () => {
      const names = new Map(['running', 'older', 'old', 'young'].map((n) => [imageCachePath(dir, url(n)).slice(dir.length + 1), n]));
      return (await readdir(dir)).map((n) => names.get(n) ?? n).sort();
    };
    const excess = async () => (await metrics.imageQuotaExcessBytes.get()).values.find((v) => v.labels.cache === 'url-cache')?.value;

    // Four entries past 2.5 of them: down to 80/85 of that takes the two least recently used unpinned.
    const roomy = collector(2.5 * entryBytes);
    t.equal(await roomy.runOnce(), 'freed');
    t.same(await left(), ['running', 'young'], 'older and old went; the pinned and the young stay');
    t.equal(await excess(), 0);
    t.equal(await roomy.runOnce(), 'below-threshold', 'within the quota: nothing more goes');
    await roomy.admit(url('new'), 'disks[0].source.url');
    t.pass('within the quota a new URL may download');

    // A quota of 1.5 entries: an old entry is collected by the pass the refusal runs first; the pinned and young still fill it.
    await age('old', 500);
    const tight = collector(1.5 * entryBytes);
    await t.rejects(tight.admit(url('new'), 'disks[0].source.url'), {
      constructor: ImagePullError,
      reason: 'ErrImagePull',
      message: /^disks\[0\]\.source\.url: .*quota \(--image-cache-quota-mib\)/,
    });
    t.same(await left(), ['running', 'young'], 'the pass before the refusal collected what it could');
    t.equal((await metrics.imageCacheQuotaRefusals.get()).values[0]?.value, 1);
    t.equal(await excess(), 2 * entryBytes - 1.5 * entryBytes, 'what stays over the quota is reported');
    await tight.admit(url('running'), 'disks[0].source.url');
    t.pass('a URL already cached adds nothing: never refused');
    await tight.stop();
  },
);
