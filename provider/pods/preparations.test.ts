import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import type { VmSpec } from '../../vmm/spec.js';
import { podControllerEnv, vmPod, type PodControllerEnv } from '../../test/helpers/pod-controller.js';
import { imageCachePath } from '../../vmm/disks/image-cache.js';
import { UrlImagesInUse } from '../images/url-cache-gc.js';
import { Preparations } from './preparations.js';

/** Waits until `ready` holds, letting promises run; the fakes never wait on time. */
async function until(what: string, ready: () => boolean): Promise<void> {
  for (let i = 0; i < 5000; i++) {
    if (ready()) return;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`never came true: ${what}`);
}

/** A promise per key that the test settles. */
function gates() {
  const open = new Map<string, () => void>();
  return {
    wait: (key: string) => new Promise<void>((resolve) => open.set(key, resolve)),
    started: () => [...open.keys()],
    releaseAll: () => {
      for (const release of open.values()) release();
    },
  };
}

const phaseOf = (env: PodControllerEnv, name: string) => {
  const s = env.pods.get(`ns/${name}`)?.status;
  return s
    ? `${s.phase}/${s.containerStatuses?.[0]?.state?.waiting?.reason ?? Object.keys(s.containerStatuses?.[0]?.state ?? {})[0]}`
    : 'none';
};

const deleting = (env: PodControllerEnv, name: string) =>
  env.pods.update(`ns/${name}`, (p) => ({
    ...p,
    metadata: { ...p.metadata, deletionTimestamp: new Date(env.clock.now()), deletionGracePeriodSeconds: 0 },
  }));

t.test(
  'pulls and downloads run off the sync workers: with more slow ones than workers, another pod starts and deletions go through',
  async (t) => {
    const pulls = gates();
    const downloads = gates();
    const images = {
      resolve: async (_pod: V1Pod, spec: VmSpec) => {
        const disk = spec.disks[0]!.source;
        if (disk.kind !== 'registry') return { spec, fromRegistry: false };
        await pulls.wait(disk.image);
        const disks = spec.disks.map((d) => ({ ...d, source: { kind: 'image' as const, path: '/store/disk', fromImageStore: true } }));
        return { spec: { ...spec, disks }, fromRegistry: true };
      },
      resolveRunning: async (spec: VmSpec) => spec,
    };
    const env = await podControllerEnv(t, undefined, undefined, images, { downloadImage: (url) => downloads.wait(url) });
    env.pods.put(vmPod('old'));
    await env.settle();
    // Ten slow registry images and two slow URLs: more than the 8 sync workers. Registry pulls wait for the image
    // service's own cap (not in this fake), URLs for the 3 preparation slots.
    const slow = [...Array(10).keys()].map((i) => `slow-${i}`);
    for (const [i, name] of slow.entries()) {
      const pod = vmPod(name);
      pod.spec!.containers[0]!.image = `quay.io/slow/disk:v${i}`;
      env.pods.put(pod);
    }
    for (const name of ['url-0', 'url-1']) {
      const pod = vmPod(name);
      pod.spec!.containers[0]!.image = `https://images.example/${name}.qcow2`;
      env.pods.put(pod);
    }
    await until('every preparation runs', () => pulls.started().length + downloads.started().length === 12);

    env.pods.put(vmPod('quick'));
    deleting(env, 'old');
    // Two whose pulls run.
    deleting(env, 'slow-0');
    deleting(env, 'slow-9');
    await until('quick runs and the three deletions are done', () => env.launchers.running('uid-quick') && env.pods.deleted.length === 3);
    const meanwhile = {
      quick: phaseOf(env, 'quick'),
      deleted: env.pods.deleted.map((d) => d.name).sort(),
      slow: phaseOf(env, 'slow-1'),
      url: phaseOf(env, 'url-1'),
      fetching: pulls.started().length + downloads.started().length,
    };

    // The fetches end, one slot at a time: every pod left runs, the deleted ones never start.
    for (let round = 0; round < 12; round++) {
      pulls.releaseAll();
      downloads.releaseAll();
      await new Promise((r) => setImmediate(r));
    }
    const left = [...slow.slice(1, 9), 'url-0', 'url-1'];
    await until('the others run', () => left.every((name) => env.launchers.running(`uid-${name}`)));
    await env.settle();
    t.same(
      {
        meanwhile,
        after: {
          running: left.filter((name) => env.launchers.running(`uid-${name}`)),
          startsOfDeleted: ['slow-0', 'slow-9'].map((name) => env.launchers.starts.get(`uid-${name}`)),
          pulled: pulls.started().sort(),
        },
      },
      {
        meanwhile: {
          quick: 'Running/running',
          deleted: ['old', 'slow-0', 'slow-9'],
          slow: 'Pending/ContainerCreating',
          url: 'Pending/ContainerCreating',
          fetching: 12,
        },
        after: {
          running: left,
          startsOfDeleted: [undefined, undefined],
          pulled: slow.map((_, i) => `quay.io/slow/disk:v${i}`).sort(),
        },
      },
    );
  },
);

t.test('a preparation runs once per spec; a changed spec begins anew and the old result is dropped', async (t) => {
  const settled: string[] = [];
  const preps = new Preparations<string>({ maxParallel: 1, onSettled: (uid) => settled.push(uid) });
  let release!: (v: string) => void;
  const first = preps.poll('a', 'spec-1', () => new Promise((r) => (release = r)));
  const again = preps.poll('a', 'spec-1', async () => 'never run');
  const changed = preps.poll('a', 'spec-2', async () => 'for spec 2');
  release('for spec 1');
  await preps.idle();
  t.same(
    {
      first,
      again,
      changed,
      settled,
      result: preps.poll('a', 'spec-2', async () => 'x'),
      next: preps.poll('a', 'spec-2', async () => 'x'),
    },
    { first: 'pending', again: 'pending', changed: 'pending', settled: ['a'], result: { ok: true, value: 'for spec 2' }, next: 'pending' },
  );
  await preps.idle();
});

t.test('a forgotten preparation is aborted and frees its slot at once, even if its work ignores the signal', async (t) => {
  const preps = new Preparations<string>({ maxParallel: 1, onSettled: () => undefined });
  let signalOfDeleted: AbortSignal | undefined;
  // Never settles by itself: only the abort can free the one slot.
  preps.poll('deleted', 'spec', (signal) => {
    signalOfDeleted = signal;
    return new Promise<string>(() => undefined);
  });
  let ranNext = false;
  preps.poll('next', 'spec', async () => {
    ranNext = true;
    return 'next prepared';
  });
  await new Promise((r) => setImmediate(r));
  const before = { ranNext, aborted: signalOfDeleted?.aborted };
  preps.forget('deleted');
  await preps.idle();
  t.same(
    { before, after: { ranNext, aborted: signalOfDeleted?.aborted }, next: preps.poll('next', 'spec', async () => 'again') },
    { before: { ranNext: false, aborted: false }, after: { ranNext: true, aborted: true }, next: { ok: true, value: 'next prepared' } },
  );
});

t.test('a pod naming a URL pins its cache entry while it is on the node; deleted, it no longer does', async (t) => {
  const urlImages = new UrlImagesInUse();
  const env = await podControllerEnv(t, undefined, undefined, undefined, { urlImages });
  const pod = vmPod('url');
  pod.spec!.containers[0]!.image = 'https://images.example/pinned.qcow2';
  env.pods.put(pod);
  await env.settle();
  const onNode = (uid: string) => env.pods.get('ns/url')?.metadata?.uid === uid || env.launchers.running(uid);
  const whileThere = [...urlImages.cachePaths('/cache', onNode)];
  deleting(env, 'url');
  await until('the pod is deleted', () => env.pods.deleted.length === 1);
  await env.settle();
  t.same(
    { whileThere, afterDeletion: [...urlImages.cachePaths('/cache', onNode)] },
    { whileThere: [imageCachePath('/cache', 'https://images.example/pinned.qcow2')], afterDeletion: [] },
  );
});

t.test('an unbounded preparation (a registry image, capped by the image service) never waits behind the bounded ones', async (t) => {
  const preps = new Preparations<string>({ maxParallel: 1, onSettled: () => undefined });
  // A trickling URL holds the one slot.
  preps.poll('slow-url', 'spec', () => new Promise<string>(() => undefined));
  preps.poll('second-url', 'spec', async () => 'second url');
  preps.poll('cached-image', 'spec', async () => 'from the store', { bounded: false });
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  t.same(
    {
      image: preps.poll('cached-image', 'spec', async () => 'again', { bounded: false }),
      url: preps.poll('second-url', 'spec', async () => 'again'),
    },
    { image: { ok: true, value: 'from the store' }, url: 'pending' },
    'the image is prepared at once; the second URL still waits for the slot',
  );
  preps.forget('slow-url');
  preps.forget('second-url');
});
