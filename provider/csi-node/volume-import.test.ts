import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import type { V1PersistentVolumeClaimCondition, V1Pod } from '@kubernetes/client-node';
import t, { type Test } from 'tap';
import pino from 'pino';
import { run } from '../../vmm/exec.js';
import { VolumeImportError, VolumeImports, type VolumeImportsOptions } from './volume-import.js';
import type { ClaimDisk } from './import-plan.js';
import { importReportOf } from '../kubevirt/datavolume-report.js';

const MIB = 2 ** 20;
const pod: V1Pod = { metadata: { namespace: 'ns', name: 'virt-launcher-a', uid: 'u1' } };

/**
 * A claim as the API holds it: its annotations, its status conditions merged
 * by type as a strategic merge does, its resourceVersion (a patch naming
 * another is a 409 Conflict); the node's import reports in `reports`.
 */
function fakeClaimApi(annotations: Record<string, string>) {
  const held = { ...annotations };
  const conditions = new Map<string, V1PersistentVolumeClaimCondition>();
  const reports: V1PersistentVolumeClaimCondition[] = [];
  let version = 1;
  /** The API refuses the next Succeeded report (a Block volume's completion record); `readsTogether` holds that many first reads until all are in. */
  const api = { refuseSucceeded: false, readsTogether: 0 };
  const waiting: (() => void)[] = [];
  const core = {
    readNamespacedPersistentVolumeClaim: async () => {
      const snapshot = {
        metadata: { annotations: { ...held }, resourceVersion: String(version) },
        status: { conditions: [...conditions.values()] },
      };
      if (api.readsTogether > 0) {
        api.readsTogether--;
        const held = new Promise<void>((resolve) => waiting.push(resolve));
        if (api.readsTogether === 0) for (const go of waiting.splice(0)) go();
        await held;
      }
      return snapshot;
    },
    patchNamespacedPersistentVolumeClaimStatus: async (req: {
      body: { metadata?: { resourceVersion?: string }; status: { conditions: V1PersistentVolumeClaimCondition[] } };
    }) => {
      const precondition = req.body.metadata?.resourceVersion;
      if (precondition !== undefined && precondition !== String(version))
        throw Object.assign(new Error('the object has been modified'), { code: 409 });
      if (api.refuseSucceeded && req.body.status.conditions[0]?.reason === 'Succeeded') {
        api.refuseSucceeded = false;
        throw new Error('the server was unable to return a response in the time allotted');
      }
      for (const c of req.body.status.conditions) {
        conditions.set(c.type, c);
        if (c.type === 'vkvm.io/DataVolumeImport') reports.push(c);
      }
      version++;
      return {};
    },
    readNamespacedSecret: async () => Promise.reject(new Error('secrets "creds" is forbidden')),
  };
  return { core, conditions, reports, api };
}

/** A claim's annotations as the API holds them, patched as the node reports; a download that copies a local file. */
function fixture(t: Test, annotations: Record<string, string>, shared = fakeClaimApi(annotations)) {
  const dir = t.testdir({ mount: {}, scratch: {} });
  const source = join(dir, 'source.qcow2');
  const { reports, api } = shared;
  const reported = () => importReportOf(reports.slice(-1));
  const downloads: string[] = [];
  /** The disk files handed out by the image store (one per registry import). */
  const pulls: string[] = [];
  const claim: ClaimDisk = {
    namespace: 'ns',
    claim: 'root',
    pvName: 'pv-1',
    diskPath: join(dir, 'mount', 'disk.img'),
    volumeMode: 'Filesystem' as ClaimDisk['volumeMode'],
    capacityBytes: 16 * MIB,
  };
  const options: VolumeImportsOptions = {
    nodeName: 'node-a',
    clients: { core: shared.core as never },
    download: async (url, dest, _log, signal, onProgress) => {
      downloads.push(url);
      await copyFile(source, dest);
      const { size } = await stat(dest);
      for (const received of [size / 2, size]) {
        onProgress?.(received, size);
        // As downloadToFile: an aborted signal stops the copy.
        signal?.throwIfAborted();
      }
      return size;
    },
    registryDisk: async () => {
      pulls.push(source);
      return source;
    },
    scratchDir: join(dir, 'scratch'),
    // A regular file stands for the device here: qemu-img writes both alike.
    deviceBytes: async (device) => (await stat(device)).size,
    log: pino({ level: 'silent' }),
  };
  const imports = new VolumeImports(options);
  /** The agent restarted: no memory but the claim's and the volume's. */
  const restarted = () => new VolumeImports(options);
  return { dir, source, reported, reports, downloads, pulls, claim, imports, restarted, api, options, shared };
}

t.test('an http source is converted into disk.img at the claim size with a marker; a second start imports nothing', async (t) => {
  const f = fixture(t, {
    'cdi.kubevirt.io/storage.import.source': 'http',
    'cdi.kubevirt.io/storage.import.endpoint': 'http://img/d.qcow2',
  });
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
  await run('qemu-io', ['-c', 'write -P 0x5a 1M 64k', f.source]);
  // What an agent killed mid-import left behind: restarted from scratch.
  await writeFile(join(f.dir, 'mount', '.vkvm-import.img.tmp'), 'half');
  await f.imports.ensure(pod, [f.claim]);
  const info = JSON.parse(await run('qemu-img', ['info', '--output=json', f.claim.diskPath])) as { format: string; 'virtual-size': number };
  const bytes = await readFile(f.claim.diskPath);
  t.match(
    {
      format: info.format,
      size: info['virtual-size'],
      written: bytes.subarray(MIB, MIB + 4).toString('hex'),
      files: (await readdir(join(f.dir, 'mount'))).sort(),
      report: f.reported(),
      phases: f.reports.map((r) => r.reason),
    },
    {
      format: 'raw',
      size: 16 * MIB,
      written: '5a5a5a5a',
      files: ['.vkvm-imported', 'disk.img'],
      report: { phase: 'Succeeded', progress: '100.00%' },
      phases: ['Running', 'Running', 'Succeeded'],
    },
    'raw disk.img of the guest bytes grown to the claim, the marker, no temporary file, the download progress, Succeeded at 100.00%',
  );
  await f.imports.ensure(pod, [f.claim]);
  t.same(f.downloads, ['http://img/d.qcow2'], 'the second start downloads nothing');
  t.equal(f.reports.length, 3, 'and reports nothing more');
});

t.test('a raw http source is the disk as downloaded (no convert); the download reports progress', async (t) => {
  const f = fixture(t, {
    'cdi.kubevirt.io/storage.import.source': 'http',
    'cdi.kubevirt.io/storage.import.endpoint': 'http://img/d.raw',
  });
  await writeFile(f.source, Buffer.alloc(8 * MIB, 0x6b));
  await f.imports.ensure(pod, [f.claim]);
  const bytes = await readFile(f.claim.diskPath);
  t.match(
    {
      size: bytes.length,
      first: bytes.subarray(0, 2).toString('hex'),
      tail: bytes.subarray(8 * MIB).every((b) => b === 0),
      files: (await readdir(join(f.dir, 'mount'))).sort(),
      progress: f.reports.map((r) => `${r.reason} ${r.message}`),
    },
    {
      size: 16 * MIB,
      first: '6b6b',
      tail: true,
      files: ['.vkvm-imported', 'disk.img'],
      progress: ['Running 0.00%', 'Running 45.00%', 'Succeeded 100.00%'],
    },
    'the downloaded bytes grown to the claim, half the download reported as 45 %, 90 % throttled away, then Succeeded',
  );
});

t.test('failures: reported Failed on the claim, a VolumeImportError naming the claim and the annotation', async (t) => {
  const cases: [string, Record<string, string>, RegExp][] = [
    [
      'an image larger than the claim',
      { 'cdi.kubevirt.io/storage.import.source': 'registry', 'cdi.kubevirt.io/storage.import.endpoint': 'docker://r/i:1' },
      /^claim "root": import failed: spec\.resources\.requests\.storage: the image's virtual size, 32 MiB, is larger than claim "root"'s capacity, 16 MiB$/,
    ],
    [
      'an import secret the node may not read',
      {
        'cdi.kubevirt.io/storage.import.source': 'registry',
        'cdi.kubevirt.io/storage.import.endpoint': 'docker://r/i:1',
        'cdi.kubevirt.io/storage.import.secretName': 'creds',
      },
      /^claim "root": import failed: cdi\.kubevirt\.io\/storage\.import\.secretName: Secret ns\/creds cannot be read by node node-a: /,
    ],
    [
      'an unknown source',
      { 'cdi.kubevirt.io/storage.import.source': 'gcs' },
      /^claim "root": import failed: cdi\.kubevirt\.io\/storage\.import\.source: "gcs" is not one of/,
    ],
  ];
  for (const [name, annotations, want] of cases) {
    const f = fixture(t, annotations);
    await run('qemu-img', ['create', '-f', 'qcow2', f.source, '32M']);
    const err = await f.imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
    t.match(
      {
        err,
        phase: f.reported()?.phase,
        message: f.reported()?.message,
        files: await readdir(join(f.dir, 'mount')),
      },
      {
        err: { constructor: VolumeImportError, message: want },
        phase: 'Failed',
        message: (err as Error).message.replace('claim "root": import failed: ', ''),
        files: [],
      },
      name,
    );
  }
});

const REGISTRY = { 'cdi.kubevirt.io/storage.import.source': 'registry', 'cdi.kubevirt.io/storage.import.endpoint': 'docker://r/i:1' };

/**
 * A Block claim whose "device" is a 16 MiB file of 0xff but its first and
 * last MiB (a fresh volume reads zeros there: the node's check that it holds
 * no data), so every byte qemu-img writes in between (zeros too) shows.
 */
async function blockFixture(t: Test, annotations: Record<string, string>, shared?: ReturnType<typeof fakeClaimApi>) {
  const f = fixture(t, annotations, shared);
  f.claim.volumeMode = 'Block';
  f.claim.diskPath = join(f.dir, 'mount', 'pv-1');
  await writeFile(f.claim.diskPath, FRESH_DEVICE);
  return f;
}

const FRESH_DEVICE = Buffer.alloc(16 * MIB, 0xff)
  .fill(0, 0, MIB)
  .fill(0, 15 * MIB);

t.test(
  'a registry source onto a Block volume: the device holds the raw guest, the claim records it; no restart imports again',
  async (t) => {
    const f = await blockFixture(t, REGISTRY);
    await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
    await run('qemu-io', ['-c', 'write -P 0x5a 1M 64k', f.source]);
    await f.imports.ensure(pod, [f.claim]);
    const bytes = await readFile(f.claim.diskPath);
    t.same(
      {
        size: bytes.length,
        zeroed: bytes.subarray(2 * MIB, 2 * MIB + 4).toString('hex'),
        written: bytes.subarray(MIB, MIB + 4).toString('hex'),
        pastImage: bytes.subarray(8 * MIB, 8 * MIB + 4).toString('hex'),
        files: await readdir(join(f.dir, 'mount')),
        scratch: await readdir(join(f.dir, 'scratch')),
        report: f.reported(),
      },
      {
        size: 16 * MIB,
        zeroed: '00000000',
        written: '5a5a5a5a',
        pastImage: 'ffffffff',
        files: ['pv-1'],
        scratch: [],
        report: { phase: 'Succeeded', progress: '100.00%' },
      },
      "the image's bytes (its zeros too) on the device, the device's size kept, no file beside it, Succeeded on the claim",
    );
    // The guest writes; a second start, and a restarted agent (a new VolumeImports), leave it alone.
    await writeFile(f.claim.diskPath, Buffer.from('guest'), { flag: 'r+' });
    const reports = f.reports.length;
    await f.imports.ensure(pod, [f.claim]);
    await f.restarted().ensure(pod, [f.claim]);
    t.same(
      { head: (await readFile(f.claim.diskPath)).subarray(0, 5).toString(), reports: f.reports.length },
      { head: 'guest', reports },
      "the guest's write survives a second start: the claim's Succeeded is the record",
    );
  },
);

t.test(
  'a raw http source onto a Block volume: downloaded into the scratch dir, written onto the device; the download, and one a killed agent left, gone',
  async (t) => {
    const f = await blockFixture(t, {
      'cdi.kubevirt.io/storage.import.source': 'http',
      'cdi.kubevirt.io/storage.import.endpoint': 'http://img/d.raw',
    });
    await writeFile(f.source, Buffer.alloc(8 * MIB, 0x6b));
    // What an agent killed mid-download left, for a claim since deleted.
    await writeFile(join(f.dir, 'scratch', 'pv-gone.vkvm-import.download.tmp'), 'half');
    await f.imports.ensure(pod, [f.claim]);
    const bytes = await readFile(f.claim.diskPath);
    t.same(
      {
        first: bytes.subarray(0, 2).toString('hex'),
        last: bytes.subarray(8 * MIB - 2, 8 * MIB).toString('hex'),
        size: bytes.length,
        downloads: f.downloads,
        scratch: await readdir(join(f.dir, 'scratch')),
        phases: f.reports.map((r) => r.reason),
      },
      {
        first: '6b6b',
        last: '6b6b',
        size: 16 * MIB,
        downloads: ['http://img/d.raw'],
        scratch: [],
        phases: ['Running', 'Running', 'Succeeded'],
      },
    );
  },
);

t.test("an image larger than the Block device: Failed naming the claim's size field; the device untouched, nothing left", async (t) => {
  const f = await blockFixture(t, REGISTRY);
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '17M']);
  const err = await f.imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
  const bytes = await readFile(f.claim.diskPath);
  t.match(
    {
      err,
      report: f.reported(),
      untouched: bytes.equals(FRESH_DEVICE),
      scratch: await readdir(join(f.dir, 'scratch')),
    },
    {
      err: {
        constructor: VolumeImportError,
        message: `claim "root": import failed: spec.resources.requests.storage: the image's virtual size, 17 MiB, is larger than claim "root"'s block device's size, 16 MiB`,
      },
      report: { phase: 'Failed', message: /^spec\.resources\.requests\.storage: / },
      untouched: true,
      scratch: [],
    },
  );
});

t.test('a Block import whose completion cannot be recorded on the claim fails, and the next start imports again', async (t) => {
  const f = await blockFixture(t, REGISTRY);
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
  f.api.refuseSucceeded = true;
  const err = await f.imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
  t.match(
    { err, report: f.reported() },
    {
      err: { constructor: VolumeImportError, message: /import failed: .*the import's completion could not be recorded on the claim: / },
      report: { phase: 'Failed' },
    },
    'Failed, never Succeeded',
  );
  await writeFile(f.claim.diskPath, Buffer.alloc(16, 0x11), { flag: 'r+' });
  await f.imports.ensure(pod, [f.claim]);
  t.same(
    { head: (await readFile(f.claim.diskPath)).subarray(0, 2).toString('hex'), report: f.reported()?.phase },
    { head: '0000', report: 'Succeeded' },
    'imported again, then recorded',
  );
});

t.test('a Block claim made again over a device with data (no import record on it) is refused, never imported over', async (t) => {
  const f = await blockFixture(t, REGISTRY);
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
  // What a restored or re-bound claim finds: the guest's data, and a claim with no status.
  await writeFile(f.claim.diskPath, Buffer.from('guest data'), { flag: 'r+' });
  const before = await readFile(f.claim.diskPath);
  for (const imports of [f.imports, f.restarted()]) {
    const err = await imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
    t.match(err, {
      constructor: VolumeImportError,
      message: /cdi\.kubevirt\.io\/storage\.import\.endpoint: the block device already holds data/,
    });
  }
  t.same(
    { untouched: (await readFile(f.claim.diskPath)).equals(before), report: f.reported()?.phase },
    { untouched: true, report: 'Failed' },
    'the refusal, recorded on the claim, does not count as an import of this claim the next time',
  );
});

t.test('a Block claim CDI imported (its storage.pod.phase Succeeded) is not imported again', async (t) => {
  const f = await blockFixture(t, { ...REGISTRY, 'cdi.kubevirt.io/storage.pod.phase': 'Succeeded' });
  await writeFile(f.claim.diskPath, Buffer.from('cdi image'), { flag: 'r+' });
  await f.imports.ensure(pod, [f.claim]);
  t.same((await readFile(f.claim.diskPath)).subarray(0, 9).toString(), 'cdi image');
});

const HTTP_RAW = { 'cdi.kubevirt.io/storage.import.source': 'http', 'cdi.kubevirt.io/storage.import.endpoint': 'http://img/d.raw' };
const settled = (r: PromiseSettledResult<void>) => (r.status === 'fulfilled' ? 'imported' : (r.reason as Error).message);

t.test(
  'an RWX Block claim started on two nodes at once: one node imports, the other waits for it; its retry imports nothing',
  async (t) => {
    const f = await blockFixture(t, REGISTRY);
    f.claim.multiNode = true;
    await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
    const nodeB = new VolumeImports({ ...f.options, nodeName: 'node-b' });
    // Both read the claim before either writes it.
    f.api.readsTogether = 2;
    const results = await Promise.allSettled([f.imports.ensure(pod, [f.claim]), nodeB.ensure(pod, [f.claim])]);
    const winner = f.shared.conditions.get('vkvm.io/DataVolumeImporter')?.message;
    const loser = winner === 'node-a' ? 'node-b' : 'node-a';
    t.match(
      { pulls: f.pulls.length, winner, outcomes: results.map(settled).sort(), report: f.reported()?.phase },
      {
        pulls: 1,
        winner: /^node-[ab]$/,
        outcomes: [
          'imported',
          `claim "root": node ${winner} is importing it (its vkvm.io/DataVolumeImporter condition, Running); this start waits for that import and retries`,
        ].sort(),
        report: 'Succeeded',
      },
      `one import (by ${winner}); ${loser} failed its start naming the claim and the importing node, and wrote nothing`,
    );
    await (loser === 'node-a' ? f.imports : nodeB).ensure(pod, [f.claim]);
    t.equal(f.pulls.length, 1, "the loser's retry finds the winner's completion record and imports nothing");
  },
);

t.test("another node's Running import holds the claim until its report goes stale; then this node takes it over", async (t) => {
  const f = await blockFixture(t, REGISTRY);
  f.claim.multiNode = true;
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
  const now = new Date();
  f.shared.conditions.set('vkvm.io/DataVolumeImport', {
    type: 'vkvm.io/DataVolumeImport',
    status: 'Unknown',
    reason: 'Running',
    message: '40.00%',
    lastTransitionTime: now,
  });
  f.shared.conditions.set('vkvm.io/DataVolumeImporter', {
    type: 'vkvm.io/DataVolumeImporter',
    status: 'True',
    reason: 'Claimed',
    message: 'node-b',
    lastTransitionTime: now,
  });
  const err = await f.imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
  t.match(
    { err, pulls: f.pulls.length, reports: f.reports.length, untouched: (await readFile(f.claim.diskPath)).equals(FRESH_DEVICE) },
    {
      err: { constructor: VolumeImportError, message: /^claim "root": node node-b is importing it/ },
      pulls: 0,
      reports: 0,
      untouched: true,
    },
  );
  const later = new VolumeImports({ ...f.options, now: () => new Date(now.getTime() + 6 * 60_000) });
  await later.ensure(pod, [f.claim]);
  t.same(
    { pulls: f.pulls.length, importer: f.shared.conditions.get('vkvm.io/DataVolumeImporter')?.message, report: f.reported()?.phase },
    { pulls: 1, importer: 'node-a', report: 'Succeeded' },
    'no report for 6 minutes (past IMPORT_STALE_MS): node-a took the import',
  );
});

t.test('two VMs of one agent on one claim at once: one import, the second waits for it', async (t) => {
  const f = await blockFixture(t, REGISTRY);
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
  const other: V1Pod = { metadata: { namespace: 'ns', name: 'virt-launcher-b', uid: 'u2' } };
  await Promise.all([f.imports.ensure(pod, [f.claim]), f.imports.ensure(other, [f.claim])]);
  t.same({ pulls: f.pulls.length, phases: f.reports.map((r) => r.reason) }, { pulls: 1, phases: ['Running', 'Succeeded'] });
});

t.test('a read-only use of a Block claim never imports: refused naming the field, nothing written; once imported it starts', async (t) => {
  const f = await blockFixture(t, REGISTRY);
  await run('qemu-img', ['create', '-f', 'qcow2', f.source, '8M']);
  const readOnly = { ...f.claim, readOnly: 'spec.volumes[0].persistentVolumeClaim.readOnly' };
  const err = await f.imports.ensure(pod, [readOnly]).catch((e: unknown) => e);
  t.match(
    { err, pulls: f.pulls.length, reports: f.reports.length, untouched: (await readFile(f.claim.diskPath)).equals(FRESH_DEVICE) },
    {
      err: {
        constructor: VolumeImportError,
        message:
          /^claim "root": its DataVolume import is not done and spec\.volumes\[0\]\.persistentVolumeClaim\.readOnly makes the volume read-only here/,
      },
      pulls: 0,
      reports: 0,
      untouched: true,
    },
  );
  // A writable consumer imports; the read-only one then finds the completion record.
  await f.imports.ensure(pod, [f.claim]);
  await f.imports.ensure(pod, [readOnly]);
  t.equal(f.pulls.length, 1);
});

t.test("a Block http download larger than the device is stopped, Failed naming the claim's size field", async (t) => {
  const f = await blockFixture(t, HTTP_RAW);
  await writeFile(f.source, Buffer.alloc(32 * MIB, 0x6b));
  const err = await f.imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
  t.match(
    {
      err,
      report: f.reported(),
      untouched: (await readFile(f.claim.diskPath)).equals(FRESH_DEVICE),
      scratch: await readdir(join(f.dir, 'scratch')),
    },
    {
      err: {
        constructor: VolumeImportError,
        message: `claim "root": import failed: spec.resources.requests.storage: the image download is larger than claim "root"'s block device's size, 16 MiB; the download was stopped`,
      },
      report: { phase: 'Failed', message: /^spec\.resources\.requests\.storage: the image download is larger/ },
      untouched: true,
      scratch: [],
    },
  );
});

t.test('a scratch directory that is a mount point is emptied, not removed', async (t) => {
  const f = await blockFixture(t, HTTP_RAW);
  // Outside the test's own directory, which tap removes (a mount point in it could not be).
  const scratch = await mkdtemp(join(tmpdir(), 'vkvm-scratch-'));
  await run('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'vkvm-test-scratch', scratch]);
  t.teardown(async () => {
    await run('umount', [scratch]);
    await rm(scratch, { recursive: true });
  });
  await writeFile(join(scratch, 'pv-gone.vkvm-import.download.tmp'), 'half');
  await writeFile(f.source, Buffer.alloc(8 * MIB, 0x6b));
  await new VolumeImports({ ...f.options, scratchDir: scratch }).ensure(pod, [f.claim]);
  t.same(
    {
      report: f.reported()?.phase,
      scratch: await readdir(scratch),
      mounted: (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').some((l) => l.split(' ')[4] === scratch),
    },
    { report: 'Succeeded', scratch: [], mounted: true },
  );
});

t.test('a scratch directory that cannot be made ready fails the import, and the next import tries again', async (t) => {
  const f = await blockFixture(t, HTTP_RAW);
  await writeFile(f.source, Buffer.alloc(8 * MIB, 0x6b));
  const blocker = join(f.dir, 'blocker');
  await writeFile(blocker, 'a file where the directory should be');
  const imports = new VolumeImports({ ...f.options, scratchDir: join(blocker, 'scratch') });
  const err = await imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
  t.match(err, { message: /^the node's scratch directory .*\/blocker\/scratch could not be emptied: / });
  t.equal(f.reports.length, 0, 'the claim is not taken');
  await rm(blocker);
  await mkdir(blocker);
  await imports.ensure(pod, [f.claim]);
  t.equal(f.reported()?.phase, 'Succeeded', 'the same agent tried again');
});

t.test(
  'an import on a shared volume stops when its reports no longer reach the API server, before another node may take it over',
  async (t) => {
    const f = await blockFixture(t, HTTP_RAW);
    f.claim.multiNode = true;
    const imports = new VolumeImports({
      ...f.options,
      lease: { heartbeatMs: 20, fenceMs: 60 },
      // A download that runs until stopped; the API server is gone once the node has claimed the import.
      download: (_url, _dest, _log, signal) =>
        new Promise((_resolve, reject) => {
          f.shared.core.patchNamespacedPersistentVolumeClaimStatus = () => Promise.reject(new Error('connect ECONNREFUSED'));
          // The heartbeat's timer keeps no process alive; the agent's sockets do.
          const alive = setInterval(() => undefined, 1000);
          signal?.addEventListener('abort', () => {
            clearInterval(alive);
            reject(signal.reason as Error);
          });
        }),
    });
    const err = await imports.ensure(pod, [f.claim]).catch((e: unknown) => e);
    t.match(
      { err, phases: f.reports.map((r) => r.reason), untouched: (await readFile(f.claim.diskPath)).equals(FRESH_DEVICE) },
      {
        err: { constructor: VolumeImportError, message: /^claim "root": import stopped: no report reached the API server for 60 ms/ },
        phases: ['Running'],
        untouched: true,
      },
    );
  },
);
