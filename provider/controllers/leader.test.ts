import t from 'tap';
import { ApiException, type V1Lease } from '@kubernetes/client-node';
import { pino } from 'pino';
import { LeaderElector, type LeaseApi } from './leader.js';

/** An in-memory Lease store with resourceVersion checks, as the API server does them. */
function fakeLeases(): LeaseApi & { lease?: V1Lease } {
  let rv = 0;
  const store: { lease?: V1Lease } = {};
  const copy = (l: V1Lease): V1Lease => structuredClone(l);
  return {
    get lease() {
      return store.lease;
    },
    async readNamespacedLease() {
      if (!store.lease) throw new ApiException(404, 'not found', {}, {});
      return copy(store.lease);
    },
    async createNamespacedLease({ body }) {
      if (store.lease) throw new ApiException(409, 'exists', {}, {});
      store.lease = { ...copy(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
      return copy(store.lease);
    },
    async replaceNamespacedLease({ body }) {
      if (body.metadata?.resourceVersion !== store.lease?.metadata?.resourceVersion) throw new ApiException(409, 'conflict', {}, {});
      store.lease = { ...copy(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
      return copy(store.lease);
    },
  };
}

function elector(api: LeaseApi, identity: string, clock: { now: number }) {
  return new LeaderElector({
    api,
    name: 'vkvm-controllers',
    namespace: 'kube-system',
    identity,
    leaseDurationS: 15,
    renewDeadlineMs: 10_000,
    retryPeriodMs: 2_000,
    onStartedLeading: () => {},
    onStoppedLeading: () => {},
    log: pino({ level: 'silent' }),
    now: () => clock.now,
  });
}

t.test('one holder at a time; another takes over only after the lease went unrenewed for its duration, as observed locally', async (t) => {
  const api = fakeLeases();
  const clock = { now: 1_000_000 };
  const a = elector(api, 'a', clock);
  const b = elector(api, 'b', clock);
  t.equal(await a.tryAcquireOrRenew(), true, 'a creates the lease');
  t.equal(await b.tryAcquireOrRenew(), false, 'b sees it held');
  clock.now += 10_000;
  t.equal(await a.tryAcquireOrRenew(), true, 'a renews');
  clock.now += 10_000;
  t.equal(await b.tryAcquireOrRenew(), false, 'renewed 10 s ago by b’s clock: still held');
  clock.now += 16_000;
  t.equal(await b.tryAcquireOrRenew(), true, 'unrenewed for longer than 15 s: b takes over');
  t.equal(api.lease?.spec?.holderIdentity, 'b');
  t.equal(await a.tryAcquireOrRenew(), false, 'a, back, finds b holding a fresh lease');
});

t.test('two candidates writing from the same read: the resourceVersion lets only one win', async (t) => {
  const api = fakeLeases();
  const clock = { now: 0 };
  await elector(api, 'old', clock).tryAcquireOrRenew();
  clock.now += 60_000;
  const a = elector(api, 'a', clock);
  const b = elector(api, 'b', clock);
  // Both observe the old holder first, then both find it expired.
  await a.tryAcquireOrRenew().catch(() => false);
  const stale = await api.readNamespacedLease({ name: 'vkvm-controllers', namespace: 'kube-system' });
  clock.now += 16_000;
  t.equal(await a.tryAcquireOrRenew(), true, 'a wins');
  await t.rejects(
    api.replaceNamespacedLease({ name: 'vkvm-controllers', namespace: 'kube-system', body: stale }),
    { code: 409 },
    'a write from the stale read conflicts',
  );
  t.equal(await b.tryAcquireOrRenew(), false, 'b sees a fresh holder');
});
