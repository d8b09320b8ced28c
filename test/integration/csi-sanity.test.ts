// vkvm's CSI driver judged as any CSI driver is: csi-sanity
// (github.com/kubernetes-csi/csi-test/v5) against `vkvm csi`, once with
// filesystem volumes and once with block volumes, on a fresh directory. Then
// nothing may be left: no volume or snapshot file or record, no loop device
// over the directory's files, no mount below the test's directory.
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { loopDevicesUnder, mountsUnder, removeScratch } from '../helpers/csi-leftovers.js';
import { startDriverProcess } from '../helpers/csi-driver.js';
import { ensureCsiSanity } from '../helpers/csi-sanity.js';

/** Small volumes keep mkfs and copies quick; sanity's default is 10 GiB. */
const TEST_VOLUME_BYTES = 64 * 1024 * 1024;

function runSanity(bin: string, args: string[]): Promise<{ code: number | null; output: string; wallMs: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, output, wallMs: Date.now() - started }));
  });
}

for (const accessType of ['mount', 'block'] as const) {
  t.test(`csi-sanity passes against vkvm csi with ${accessType} volumes and leaves nothing behind`, async (t) => {
    const bin = await ensureCsiSanity();
    // Short: a unix socket's path must fit in 107 bytes, and tap's test dirs are long.
    const root = await mkdtemp('/tmp/vkvm-csi-');
    t.teardown(() => removeScratch(root));
    const dir = join(root, 'volumes');
    const driver = await startDriverProcess({ dir, socket: join(root, 'csi.sock'), nodeId: 'sanity-node' });
    t.teardown(() => driver.stop());
    const run = await runSanity(bin, [
      `--csi.endpoint=${driver.socket}`,
      `--csi.mountdir=${join(root, 'target')}`,
      `--csi.stagingdir=${join(root, 'staging')}`,
      `--csi.testvolumesize=${TEST_VOLUME_BYTES}`,
      `--csi.testvolumeaccesstype=${accessType}`,
      '--ginkgo.no-color',
    ]);
    const summary = /Ran (\d+) of \d+ Specs[\s\S]*?(\d+) Passed \| (\d+) Failed/.exec(run.output);
    t.comment(`csi-sanity (${accessType}): ${summary?.[0].replace(/\s+/g, ' ')}; wall ${run.wallMs} ms`);
    t.match(
      { code: run.code, passed: Number(summary?.[2] ?? 0), failed: Number(summary?.[3] ?? -1) },
      { code: 0, passed: Number(summary?.[1] ?? 'NaN'), failed: 0 },
      'every spec that ran passed',
      { sanity: run.output.slice(-6000), driver: driver.output().slice(-4000) },
    );
    const state = JSON.parse(await readFile(join(dir, 'state.json'), 'utf8')) as { volumes: unknown[]; snapshots: unknown[] };
    t.same(
      {
        records: [state.volumes.length, state.snapshots.length],
        files: [...(await readdir(join(dir, 'volumes'))), ...(await readdir(join(dir, 'snapshots')))],
        loops: await loopDevicesUnder(dir),
        mounts: await mountsUnder(root),
      },
      { records: [0, 0], files: [], loops: [], mounts: [] },
      'no volume, snapshot, loop device or mount is left',
    );
    t.equal(await driver.stop(), 0, 'the driver stops cleanly on SIGTERM');
  });
}
