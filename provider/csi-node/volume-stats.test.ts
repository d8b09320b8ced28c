import t from 'tap';
import { podVolumeName, volumeSamples, volumeStatsOf } from './volume-stats.js';

const time = '2026-11-28T01:00:00Z';
const pvcRef = { name: 'data', namespace: 'tenant' };

t.test("NodeGetVolumeStats' usage becomes the summary's VolumeStats: bytes, inodes, or bytes only", async (t) => {
  t.same(
    [
      volumeStatsOf(
        [
          { unit: 'BYTES', total: 1000, available: 600, used: 300 },
          { unit: 'INODES', total: 64, available: 53, used: 11 },
        ],
        { name: 'datadisk', pvcRef, time },
      ),
      // A block volume: its size only (the driver knows nothing of what the guest wrote).
      volumeStatsOf([{ unit: 'BYTES', total: '4096' }], { name: 'raw', time }),
      volumeStatsOf([], { name: 'silent', time }),
    ],
    [
      {
        time,
        name: 'datadisk',
        pvcRef,
        capacityBytes: 1000,
        usedBytes: 300,
        availableBytes: 600,
        inodes: 64,
        inodesUsed: 11,
        inodesFree: 53,
      },
      { time, name: 'raw', capacityBytes: 4096, usedBytes: 0, availableBytes: 0 },
      { time, name: 'silent' },
    ],
  );
});

t.test('a volume is named as the pod names it, else by its PV', async (t) => {
  const volumes = [{ name: 'rootdisk', persistentVolumeClaim: { claimName: 'root' } }, { name: 'cloudinit' }];
  t.same(
    [podVolumeName(volumes, 'root', 'pv-1'), podVolumeName(volumes, 'other', 'pv-2'), podVolumeName(volumes, undefined, 'pv-3')],
    ['rootdisk', 'pv-2', 'pv-3'],
  );
});

t.test('the gauges: one sample per claim and reported figure; no claim, no series', async (t) => {
  const full = volumeStatsOf([{ unit: 'BYTES', total: 10, available: 7, used: 3 }], { name: 'a', pvcRef, time });
  t.same(volumeSamples([full, { ...full, name: 'again' }, { time, name: 'unclaimed', capacityBytes: 5 }]), [
    { metric: 'kubelet_volume_stats_capacity_bytes', labels: { namespace: 'tenant', persistentvolumeclaim: 'data' }, value: 10 },
    { metric: 'kubelet_volume_stats_available_bytes', labels: { namespace: 'tenant', persistentvolumeclaim: 'data' }, value: 7 },
    { metric: 'kubelet_volume_stats_used_bytes', labels: { namespace: 'tenant', persistentvolumeclaim: 'data' }, value: 3 },
  ]);
});
