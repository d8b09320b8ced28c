// DataVolume import (#27): the node agent's import of an http source
// (provider/csi-node/volume-import.ts: the node's URL download under its
// address policy, qemu-img convert to raw in the volume, rename, marker)
// against `qemu-img convert -O raw` of the same image from a local file, and
// against what one would do by hand (curl, then qemu-img convert), in the same
// run. The image is a qcow2 of IMAGE_MIB random bytes, served over
// HTTP on loopback (allowed here as an operator's --image-download-allow
// would). CDI's users report its import many times slower than a plain
// download and convert (kubevirt/containerized-data-importer#2809).
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { VolumeImports } from '../../provider/csi-node/volume-import.js';
import { DEFAULT_DOWNLOAD_POLICY } from '../../vmm/disks/download-policy.js';
import { downloadToFile } from '../../vmm/disks/download.js';
import type { BenchContext, Benchmark } from './bench.js';
import { percentile } from './stats.js';

const IMAGE_MIB = 256;
const RUNS = 3;

async function importVsConvert(ctx: BenchContext): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-bench-import-'));
  ctx.defer('the bench directory', () => rm(dir, { recursive: true, force: true }));
  const raw = join(dir, 'source.raw');
  const image = join(dir, 'source.qcow2');
  execFileSync('sh', ['-c', `head -c ${IMAGE_MIB}M /dev/urandom > ${raw}`]);
  execFileSync('qemu-img', ['convert', '-f', 'raw', '-O', 'qcow2', raw, image]);
  await rm(raw);
  const { size } = await stat(image);
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-length': size, 'content-type': 'application/octet-stream' });
    createReadStream(image).pipe(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  ctx.defer('the image server', () => new Promise<void>((resolve) => server.close(() => resolve())));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/disk.qcow2`;
  const policy = { ...DEFAULT_DOWNLOAD_POLICY, allowedCidrs: ['127.0.0.0/8'] };
  const log = pino({ level: 'silent' });
  const imports = new VolumeImports({
    nodeName: 'bench',
    clients: {
      core: {
        readNamespacedPersistentVolumeClaim: async () => ({
          metadata: { annotations: { 'cdi.kubevirt.io/storage.import.source': 'http', 'cdi.kubevirt.io/storage.import.endpoint': url } },
        }),
        patchNamespacedPersistentVolumeClaimStatus: async () => ({}),
      } as never,
    },
    download: (u, dest, l, signal) => downloadToFile(u, dest, policy, l, signal),
    registryDisk: () => Promise.reject(new Error('no registry source here')),
    log,
  });
  const pod = { metadata: { namespace: 'bench', name: 'bench', uid: 'bench' } };

  const importS: number[] = [];
  const convertS: number[] = [];
  const byHandS: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    ctx.signal.throwIfAborted();
    // Alternated, so a change in the host's load falls on both alike.
    const volume = join(dir, `volume-${i}`);
    await mkdir(volume);
    let t0 = performance.now();
    await imports.ensure(pod, [{ namespace: 'bench', claim: 'bench', pvName: `pv-${i}`, diskPath: join(volume, 'disk.img') }]);
    importS.push((performance.now() - t0) / 1000);
    await rm(volume, { recursive: true });
    const out = join(dir, `convert-${i}.raw`);
    t0 = performance.now();
    execFileSync('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', image, out]);
    convertS.push((performance.now() - t0) / 1000);
    await rm(out);
    const fetched = join(dir, `fetched-${i}.qcow2`);
    t0 = performance.now();
    // Not execFileSync: the server is this process, and must serve meanwhile.
    await promisify(execFile)('curl', ['-sf', '-o', fetched, url]);
    execFileSync('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', fetched, out]);
    byHandS.push((performance.now() - t0) / 1000);
    await Promise.all([rm(out), rm(fetched)]);
    ctx.log(
      `run ${i + 1}: import ${importS[i]!.toFixed(2)} s, qemu-img convert ${convertS[i]!.toFixed(2)} s, curl + convert ${byHandS[i]!.toFixed(2)} s`,
    );
  }
  const mibS = (s: number[]) => IMAGE_MIB / percentile(s, 50);
  ctx.emit('datavolume_import_mib_s', mibS(importS), 'MiB/s');
  ctx.emit('qemu_img_convert_mib_s', mibS(convertS), 'MiB/s');
  ctx.emit('datavolume_import_vs_qemu_img_ratio', mibS(importS) / mibS(convertS), 'ratio');
  ctx.emit('curl_and_convert_mib_s', mibS(byHandS), 'MiB/s');
  ctx.emit('datavolume_import_vs_curl_and_convert_ratio', mibS(importS) / mibS(byHandS), 'ratio');
}

export const STORAGE_IMPORT_BENCHMARKS: Benchmark[] = [
  {
    name: 'storage.datavolume-import',
    description: `the node's import of a ${IMAGE_MIB} MiB qcow2 over http into a volume against qemu-img convert of it (median of ${RUNS})`,
    run: importVsConvert,
  },
];
