import { mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { pino } from 'pino';
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { DriverClient } from './driver-client.js';
import type { RegisteredDriver } from './plugin-watcher.js';
import { VolumeExpansions } from './volume-expansion.js';

const MiB = 2 ** 20;

t.test('a marked claim: NodeExpandVolume, disk.img grown, QEMU told, then the claim reported; the next pass does nothing', async (t) => {
  const dir = t.testdir();
  const target = join(dir, 'pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount');
  await mkdir(target, { recursive: true });
  await writeFile(join(target, 'disk.img'), '');
  const calls: string[] = [];
  const client: DriverClient = {
    async node(method, request) {
      if (method === 'NodeGetCapabilities') return { capabilities: [{ rpc: { type: 'EXPAND_VOLUME' } }] };
      calls.push(`${method} ${(request as { capacityRange: { requiredBytes: number } }).capacityRange.requiredBytes}`);
      return {};
    },
    close() {},
  };
  let claim: V1PersistentVolumeClaim = {
    metadata: { resourceVersion: '7' },
    status: { phase: 'Bound', capacity: { storage: '64Mi' }, conditions: [{ type: 'FileSystemResizePending', status: 'True' }] },
  };
  let vmFails = true;
  let pvReads = 0;
  const expansions = new VolumeExpansions({
    publications: async () => [
      { podUid: 'uid-a', pvName: 'pv-1', driver: 'd', volumeHandle: 'vol-1', volumeMode: 'Filesystem', targetPath: target },
    ],
    drivers: { driver: () => ({ client }) as unknown as RegisteredDriver },
    readPersistentVolume: async () => {
      pvReads++;
      return { spec: { capacity: { storage: '96Mi' }, claimRef: { namespace: 'ns', name: 'data' } } };
    },
    readClaim: async () => claim,
    patchClaimStatus: async (_ns, _name, body) => {
      calls.push('patch');
      const { status } = body as { status: V1PersistentVolumeClaim['status'] };
      claim = { ...claim, status: { ...claim.status, ...status } };
    },
    runningVm: () => ({
      resizeDisk: async (path, bytes) => {
        calls.push(`resizeDisk ${path.slice(dir.length)} ${bytes}`);
        if (vmFails) throw new Error('launcher unavailable');
      },
    }),
    log: pino({ level: 'silent' }),
  });
  await expansions.reconcile();
  t.same(
    calls,
    [`NodeExpandVolume ${96 * MiB}`, `resizeDisk /pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount/disk.img ${96 * MiB}`],
    'a launcher that fails leaves the claim unreported, for the next pass',
  );
  vmFails = false;
  calls.length = 0;
  await expansions.reconcile();
  t.same(
    calls,
    [`NodeExpandVolume ${96 * MiB}`, `resizeDisk /pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount/disk.img ${96 * MiB}`, 'patch'],
    'the retry repeats every step, then reports',
  );
  t.equal((await stat(join(target, 'disk.img'))).size, 96 * MiB, "disk.img is the claim's new size");
  calls.length = 0;
  pvReads = 0;
  await expansions.reconcile();
  t.same({ calls, pvReads }, { calls: [], pvReads: 0 }, 'a reported claim asks nothing more, and costs no PV read');
});
