// vkvm's CSI driver beyond what csi-sanity checks: what it made survives a
// restart (volumes, snapshots, stagings, publications, the data in them), a
// crash's leftover file is removed at start, a snapshot restores the data it
// was taken of, node-mode expansion (--expansion=node) grows a staged
// volume's file, record and loop device, and the cost of a 1 GiB clone: a byte copy on ext4, a
// copy-on-write clone on XFS (reflink), both measured.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { createRandomBlockVolume, csiClient, mountScratchXfs, startDriverProcess, type CsiCall } from '../helpers/csi-driver.js';
import { loopDevicesUnder, mountsUnder, removeScratch } from '../helpers/csi-leftovers.js';

const execFileP = promisify(execFile);
const MIB = 1024 * 1024;
const GIB = 1024 * MIB;
const SNW = { mode: 'SINGLE_NODE_WRITER' };
const fsCap = { mount: { fsType: 'ext4' }, accessMode: SNW };
const blockCap = { block: {}, accessMode: SNW };

async function scratch(t: Test): Promise<string> {
  // Short: unix socket paths must fit in 107 bytes.
  const root = await mkdtemp('/tmp/vkvm-csi-');
  t.teardown(() => removeScratch(root));
  return root;
}

async function driverAt(t: Test, root: string, dir: string) {
  const driver = await startDriverProcess({ dir, socket: join(root, 'csi.sock'), nodeId: 'node-a' });
  const client = csiClient(driver.socket);
  t.teardown(async () => {
    client.close();
    await driver.stop();
  });
  return { driver, call: client.call, close: async () => (client.close(), driver.stop()) };
}

const volumeId = (res: Record<string, unknown>) => (res.volume as { volumeId: string }).volumeId;

t.test(
  'volumes, snapshots, stagings and publications survive a restart; a crash leftover goes; a snapshot restores its data',
  async (t) => {
    const root = await scratch(t);
    const dir = join(root, 'volumes');
    const staging = join(root, 'staging');
    const target = join(root, 'target');
    await mkdir(staging);
    let d = await driverAt(t, root, dir);
    const fsVol = volumeId(
      await d.call('Controller', 'CreateVolume', { name: 'data', capacityRange: { requiredBytes: 64 * MIB }, volumeCapabilities: [fsCap] }),
    );
    const blockVol = volumeId(
      await d.call('Controller', 'CreateVolume', {
        name: 'disk',
        volumeCapabilities: [blockCap],
        capacityRange: { requiredBytes: 32 * MIB },
      }),
    );
    await d.call('Node', 'NodeStageVolume', { volumeId: fsVol, stagingTargetPath: staging, volumeCapability: fsCap });
    await d.call('Node', 'NodePublishVolume', { volumeId: fsVol, stagingTargetPath: staging, targetPath: target, volumeCapability: fsCap });
    await writeFile(join(target, 'marker'), 'written before the restart');
    const snap = (
      (await d.call('Controller', 'CreateSnapshot', { name: 'data-snap', sourceVolumeId: fsVol })).snapshot as { snapshotId: string }
    ).snapshotId;
    await d.close();
    const leftover = join(dir, 'volumes', 'vol-0123456789abcdef0123456789abcdef.img.4242.partial');
    await writeFile(leftover, 'half a copy');

    d = await driverAt(t, root, dir);
    const listed = (await d.call('Controller', 'ListVolumes', {})).entries as Array<{
      volume: { volumeId: string; capacityBytes: number };
    }>;
    const snaps = (await d.call('Controller', 'ListSnapshots', {})).entries as Array<{ snapshot: { snapshotId: string } }>;
    const stats = (await d.call('Node', 'NodeGetVolumeStats', { volumeId: fsVol, volumePath: target })).usage as Array<{ unit: string }>;
    t.same(
      {
        volumes: listed.map((e) => [e.volume.volumeId, e.volume.capacityBytes]).sort(),
        snapshots: snaps.map((e) => e.snapshot.snapshotId),
        marker: await readFile(join(target, 'marker'), 'utf8'),
        statsUnits: stats.map((u) => u.unit),
        leftover: existsSync(leftover),
      },
      {
        volumes: [
          [fsVol, 64 * MIB],
          [blockVol, 32 * MIB],
        ].sort(),
        snapshots: [snap],
        marker: 'written before the restart',
        statsUnits: ['BYTES', 'INODES'],
        leftover: false,
      },
      'after a restart the driver knows every volume and snapshot, the publication still serves its data, and the leftover is gone',
    );

    await d.call('Node', 'NodeUnpublishVolume', { volumeId: fsVol, targetPath: target });
    await d.call('Node', 'NodeUnstageVolume', { volumeId: fsVol, stagingTargetPath: staging });
    const restored = volumeId(
      await d.call('Controller', 'CreateVolume', {
        name: 'restored',
        volumeCapabilities: [fsCap],
        capacityRange: { requiredBytes: 128 * MIB },
        volumeContentSource: { snapshot: { snapshotId: snap } },
      }),
    );
    await d.call('Node', 'NodeStageVolume', { volumeId: restored, stagingTargetPath: staging, volumeCapability: fsCap });
    await d.call('Node', 'NodePublishVolume', {
      volumeId: restored,
      stagingTargetPath: staging,
      targetPath: target,
      volumeCapability: fsCap,
    });
    const restoredStats = (await d.call('Node', 'NodeGetVolumeStats', { volumeId: restored, volumePath: target })).usage as Array<{
      total: number;
    }>;
    t.same(
      { marker: await readFile(join(target, 'marker'), 'utf8'), filesystemOver100MiB: restoredStats[0]!.total > 100 * MIB },
      { marker: 'written before the restart', filesystemOver100MiB: true },
      'a volume restored from the snapshot holds its data, its filesystem grown to the larger volume',
    );
    await d.call('Node', 'NodeUnpublishVolume', { volumeId: restored, targetPath: target });
    await d.call('Node', 'NodeUnstageVolume', { volumeId: restored, stagingTargetPath: staging });
    for (const id of [fsVol, blockVol, restored]) await d.call('Controller', 'DeleteVolume', { volumeId: id });
    await d.call('Controller', 'DeleteSnapshot', { snapshotId: snap });
    t.same(
      {
        files: [...(await readdir(join(dir, 'volumes'))), ...(await readdir(join(dir, 'snapshots')))],
        target: existsSync(target),
        loops: await loopDevicesUnder(dir),
        mounts: await mountsUnder(root),
      },
      { files: [], target: false, loops: [], mounts: [] },
      'deleting everything leaves no file, target, loop device or mount',
    );
  },
);

t.test('after a reboot drops its loops and mounts, stage and publish again bring a recorded volume back', async (t) => {
  const root = await scratch(t);
  const dir = join(root, 'volumes');
  const staging = join(root, 'staging');
  const target = join(root, 'target');
  await mkdir(staging);
  let d = await driverAt(t, root, dir);
  const id = volumeId(
    await d.call('Controller', 'CreateVolume', { name: 'root', capacityRange: { requiredBytes: 32 * MIB }, volumeCapabilities: [fsCap] }),
  );
  await d.call('Node', 'NodeStageVolume', { volumeId: id, stagingTargetPath: staging, volumeCapability: fsCap });
  await d.call('Node', 'NodePublishVolume', { volumeId: id, stagingTargetPath: staging, targetPath: target, volumeCapability: fsCap });
  await writeFile(join(target, 'marker'), 'kept');
  await d.close();
  // What a reboot takes: every mount and loop device; the records and files stay.
  await execFileP('umount', [target]);
  await execFileP('umount', [staging]);
  for (const loop of await loopDevicesUnder(dir)) await execFileP('losetup', ['--detach', loop.split(' ')[0]!]);
  d = await driverAt(t, root, dir);
  await d.call('Node', 'NodeStageVolume', { volumeId: id, stagingTargetPath: staging, volumeCapability: fsCap });
  await d.call('Node', 'NodePublishVolume', { volumeId: id, stagingTargetPath: staging, targetPath: target, volumeCapability: fsCap });
  const marker = await readFile(join(target, 'marker'), 'utf8');
  await d.call('Node', 'NodeUnpublishVolume', { volumeId: id, targetPath: target });
  await d.call('Node', 'NodeUnstageVolume', { volumeId: id, stagingTargetPath: staging });
  await d.call('Controller', 'DeleteVolume', { volumeId: id });
  t.same(
    { marker, loops: await loopDevicesUnder(dir), mounts: await mountsUnder(root) },
    { marker: 'kept', loops: [], mounts: [] },
    'the volume is served again with its data, and released cleanly',
  );
});

t.test('what would lose data is refused: a never-formatted volume staged read-only, a filesystem made from a block volume', async (t) => {
  const root = await scratch(t);
  const dir = join(root, 'volumes');
  const staging = join(root, 'staging');
  await mkdir(staging);
  const d = await driverAt(t, root, dir);
  const roCap = { mount: { fsType: 'ext4' }, accessMode: { mode: 'SINGLE_NODE_READER_ONLY' } };
  const id = volumeId(
    await d.call('Controller', 'CreateVolume', { name: 'blank', capacityRange: { requiredBytes: 16 * MIB }, volumeCapabilities: [roCap] }),
  );
  const refusal = await d.call('Node', 'NodeStageVolume', { volumeId: id, stagingTargetPath: staging, volumeCapability: roCap }).then(
    () => undefined,
    (err: { code: number; details: string }) => ({ code: err.code, details: err.details }),
  );
  const loopsAfterRefusal = await loopDevicesUnder(dir);
  await d.call('Controller', 'DeleteVolume', { volumeId: id });
  const disk = volumeId(
    await d.call('Controller', 'CreateVolume', {
      name: 'disk',
      capacityRange: { requiredBytes: 16 * MIB },
      volumeCapabilities: [blockCap],
    }),
  );
  const crossMode = await d
    .call('Controller', 'CreateVolume', {
      name: 'fs-of-disk',
      volumeCapabilities: [fsCap],
      volumeContentSource: { volume: { volumeId: disk } },
    })
    .then(
      () => undefined,
      (err: { code: number; details: string }) => ({ code: err.code, details: err.details }),
    );
  await d.call('Controller', 'DeleteVolume', { volumeId: disk });
  t.match(
    { refusal, loopsAfterRefusal, crossMode, loops: await loopDevicesUnder(dir), mounts: await mountsUnder(root) },
    {
      refusal: { code: 9, details: /has no filesystem yet/ },
      loopsAfterRefusal: [],
      crossMode: { code: 3, details: /volume_content_source.volume: .* is a block volume/ },
      loops: [],
      mounts: [],
    },
    'FAILED_PRECONDITION and INVALID_ARGUMENT naming why; the refused stage undoes the loop device it made',
  );
});

/** Fills a new 1 GiB block volume with random bytes through its loop device, then clones it; the clone's time and equality. */
async function cloneFullGiB(
  t: Test,
  call: CsiCall,
  dir: string,
  staging: string,
): Promise<{ cloneMs: number; emptyCloneMs: number; same: boolean }> {
  const source = await createRandomBlockVolume(call, { driverDir: dir, staging, name: 'golden', bytes: GIB });
  const empty = volumeId(
    await call('Controller', 'CreateVolume', { name: 'empty', volumeCapabilities: [blockCap], capacityRange: { requiredBytes: GIB } }),
  );
  let started = performance.now();
  const clone = volumeId(
    await call('Controller', 'CreateVolume', {
      name: 'clone',
      volumeCapabilities: [blockCap],
      volumeContentSource: { volume: { volumeId: source } },
    }),
  );
  const cloneMs = Math.round(performance.now() - started);
  started = performance.now();
  const emptyClone = volumeId(
    await call('Controller', 'CreateVolume', {
      name: 'empty-clone',
      volumeCapabilities: [blockCap],
      volumeContentSource: { volume: { volumeId: empty } },
    }),
  );
  const emptyCloneMs = Math.round(performance.now() - started);
  const same = await execFileP('cmp', [join(dir, 'volumes', `${source}.img`), join(dir, 'volumes', `${clone}.img`)]).then(
    () => true,
    () => false,
  );
  for (const id of [source, empty, clone, emptyClone]) await call('Controller', 'DeleteVolume', { volumeId: id });
  t.comment(`clone of a full 1 GiB volume: ${cloneMs} ms; of an empty (sparse) 1 GiB volume: ${emptyCloneMs} ms`);
  return { cloneMs, emptyCloneMs, same };
}

t.test('a 1 GiB clone on ext4 is a sparse byte copy, equal to its source', async (t) => {
  const root = await scratch(t);
  const staging = join(root, 'staging');
  await mkdir(staging);
  const d = await driverAt(t, root, join(root, 'volumes'));
  const r = await cloneFullGiB(t, d.call, join(root, 'volumes'), staging);
  t.equal(r.same, true, 'the clone holds the bytes of its source');
});

t.test('a 1 GiB clone on XFS is a copy-on-write clone: under a second, equal to its source', async (t) => {
  const root = await scratch(t);
  const mnt = await mountScratchXfs(root);
  const staging = join(root, 'staging');
  await mkdir(staging);
  const dir = join(mnt, 'volumes');
  const d = await driverAt(t, root, dir);
  const r = await cloneFullGiB(t, d.call, dir, staging);
  t.same(
    { same: r.same, underASecond: r.cloneMs < 1000 },
    { same: true, underASecond: true },
    'a reflink clone takes no time for its size and holds its source bytes',
  );
  await d.close();
});

t.test('--expansion=node: no Controller EXPAND_VOLUME; NodeExpandVolume grows a staged volume where it lives', async (t) => {
  const root = await scratch(t);
  const staging = join(root, 'staging');
  const target = join(root, 'target');
  await mkdir(staging);
  const driver = await startDriverProcess({
    dir: join(root, 'volumes'),
    socket: join(root, 'csi.sock'),
    nodeId: 'node-a',
    extraArgs: ['--expansion=node'],
  });
  const client = csiClient(driver.socket);
  t.teardown(async () => {
    client.close();
    await driver.stop();
  });
  const call = client.call;
  const caps = (await call('Controller', 'ControllerGetCapabilities', {})).capabilities as Array<{ rpc: { type: string } }>;
  const vol = volumeId(
    await call('Controller', 'CreateVolume', { name: 'grow', capacityRange: { requiredBytes: 64 * MIB }, volumeCapabilities: [fsCap] }),
  );
  await call('Node', 'NodeStageVolume', { volumeId: vol, stagingTargetPath: staging, volumeCapability: fsCap });
  await call('Node', 'NodePublishVolume', { volumeId: vol, stagingTargetPath: staging, targetPath: target, volumeCapability: fsCap });
  const expand = () => call('Node', 'NodeExpandVolume', { volumeId: vol, volumePath: target, capacityRange: { requiredBytes: 96 * MIB } });
  const [first, again] = [await expand(), await expand()];
  const listed = (await call('Controller', 'ListVolumes', {})).entries as Array<{ volume: { volumeId: string; capacityBytes: number } }>;
  const device = (await execFileP('findmnt', ['-n', '-o', 'SOURCE', staging])).stdout.trim();
  t.match(
    {
      expandOffered: caps.some((c) => c.rpc.type === 'EXPAND_VOLUME'),
      first: Number(first.capacityBytes),
      again: Number(again.capacityBytes),
      recorded: listed.find((e) => e.volume.volumeId === vol)?.volume.capacityBytes,
      loopBytes: Number((await execFileP('blockdev', ['--getsize64', device])).stdout.trim()),
    },
    { expandOffered: false, first: 96 * MIB, again: 96 * MIB, recorded: 96 * MIB, loopBytes: 96 * MIB },
    'the file, its record and the loop device under the mount are 96 MiB; a retry changes nothing',
  );
  await call('Node', 'NodeUnpublishVolume', { volumeId: vol, targetPath: target });
  await call('Node', 'NodeUnstageVolume', { volumeId: vol, stagingTargetPath: staging });
  await call('Controller', 'DeleteVolume', { volumeId: vol });
});
