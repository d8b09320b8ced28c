import t from 'tap';
import { pino } from 'pino';
import type { DriverClient } from './driver-client.js';
import type { RegisteredDriver } from './plugin-watcher.js';
import type { PublicationRecord } from './volume-steps.js';
import { VolumeStatsCache } from './volume-stats-cache.js';

const pub = (podUid: string, pvName: string, driver = 'csi.vkvm.io'): PublicationRecord => ({
  podUid,
  pvName,
  driver,
  volumeHandle: `vol-${pvName}`,
  volumeMode: 'Filesystem',
  stagingPath: `/state/plugins/${pvName}/globalmount`,
  targetPath: `/state/pods/${podUid}/volumes/kubernetes.io~csi/${pvName}/mount`,
});

/** A driver that answers stats for every volume but `broken`, and offers GET_VOLUME_STATS unless told not to. */
function fakeDriver(calls: object[], offersStats = true): RegisteredDriver {
  const client: DriverClient = {
    async node(method, request) {
      if (method === 'NodeGetCapabilities')
        return {
          capabilities: [{ rpc: { type: 'STAGE_UNSTAGE_VOLUME' } }, ...(offersStats ? [{ rpc: { type: 'GET_VOLUME_STATS' } }] : [])],
        };
      calls.push({ method, request });
      if ((request as { volumeId: string }).volumeId === 'vol-broken') throw new Error('NOT_FOUND');
      return { usage: [{ unit: 'BYTES', total: 100, available: 60, used: 40 }] };
    },
    close() {},
  };
  return { client } as unknown as RegisteredDriver;
}

t.test("a pass asks each publication's driver, names the volume as its pod does, and replaces the cache whole", async (t) => {
  const calls: object[] = [];
  let pubs = [pub('uid-a', 'pv-1'), pub('uid-a', 'pv-broken'), pub('uid-b', 'pv-2', 'no.stats'), pub('uid-c', 'pv-3', 'gone')];
  pubs[1]!.volumeHandle = 'vol-broken';
  const drivers: Record<string, RegisteredDriver> = { 'csi.vkvm.io': fakeDriver(calls), 'no.stats': fakeDriver(calls, false) };
  let pvReads = 0;
  const cache = new VolumeStatsCache({
    publications: async () => pubs,
    drivers: { driver: (name) => drivers[name] },
    readPersistentVolume: async (name) => {
      pvReads++;
      return { spec: name === 'pv-1' ? { claimRef: { name: 'data', namespace: 'tenant' } } : {} };
    },
    podOf: (uid) =>
      uid === 'uid-a'
        ? { spec: { containers: [], volumes: [{ name: 'datadisk', persistentVolumeClaim: { claimName: 'data' } }] } }
        : undefined,
    log: pino({ level: 'silent' }),
    now: () => new Date('2026-11-28T01:00:00.123Z'),
  });
  await cache.refresh();
  const stats = {
    time: '2026-11-28T01:00:00Z',
    name: 'datadisk',
    pvcRef: { name: 'data', namespace: 'tenant' },
    capacityBytes: 100,
    usedBytes: 40,
    availableBytes: 60,
  };
  t.same(
    { a: cache.forPod('uid-a'), b: cache.forPod('uid-b'), c: cache.forPod('uid-c'), all: cache.all() },
    { a: [stats], b: [], c: [], all: [stats] },
    'a failing volume, a driver without GET_VOLUME_STATS and a driver not registered leave their volumes out',
  );
  t.match(calls[0], {
    method: 'NodeGetVolumeStats',
    request: { volumeId: 'vol-pv-1', volumePath: pubs[0]!.targetPath, stagingTargetPath: pubs[0]!.stagingPath },
  });
  await cache.refresh();
  t.equal(pvReads, 1, "a PV's claim is read once, not every pass");
  pubs = [];
  await cache.refresh();
  t.same(cache.all(), [], 'an unpublished volume is gone from the next pass');
});
