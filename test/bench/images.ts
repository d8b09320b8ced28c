// Image pull benchmarks against a real registry on this host (Debian's
// docker-registry on loopback): a containerDisk of IMAGE_MIB random bytes
// (a raw disk.img, one gzip layer, as quay.io/containerdisks ship them),
// pulled by the agent's ImageService into a fresh store (cold: every blob
// fetched, hashed and stored), again with every blob present (warm: the
// manifest re-resolved), and the disk taken out. Next to it, in the same run,
// `skopeo copy` of the same image and curl of the same layer: what the host
// and registry allow.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { ImageService } from '../../provider/images/image-service.js';
import { ImageStore } from '../../provider/images/store.js';
import { DEFAULT_DOWNLOAD_POLICY } from '../../vmm/disks/download-policy.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import type { BenchContext, Benchmark } from './bench.js';
import { BYTES_PER_MiB, percentile } from './stats.js';

const IMAGE_MIB = 256;
const RUNS = 3;
const REPO = 'bench/disk';

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}

/** Writes an OCI layout of one containerDisk (a raw disk of random bytes, one gzip layer); returns its layer. */
async function buildLayout(dir: string): Promise<{ digest: string; size: number }> {
  const root = join(dir, 'rootfs');
  await mkdir(join(root, 'disk'), { recursive: true });
  execFileSync('sh', ['-c', `head -c ${IMAGE_MIB}M /dev/urandom > ${root}/disk/disk.img`]);
  const layer = join(dir, 'layer.tar.gz');
  execFileSync('sh', ['-c', `tar -C ${root} --owner=107 --group=107 --numeric-owner -cf - disk | gzip -1 > ${layer}`]);
  const blobs = join(dir, 'layout', 'blobs', 'sha256');
  await mkdir(blobs, { recursive: true });
  const layerDigest = await sha256File(layer);
  const layerSize = (await stat(layer)).size;
  execFileSync('mv', [layer, join(blobs, layerDigest.slice(7))]);
  const put = async (mediaType: string, doc: unknown) => {
    const data = Buffer.from(JSON.stringify(doc));
    const digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
    await writeFile(join(blobs, digest.slice(7)), data);
    return { mediaType, digest, size: data.length };
  };
  const config = await put('application/vnd.oci.image.config.v1+json', {
    architecture: 'amd64',
    os: 'linux',
    rootfs: { type: 'layers', diff_ids: [] },
    config: {},
  });
  const manifest = await put('application/vnd.oci.image.manifest.v1+json', {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config,
    layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: layerDigest, size: layerSize }],
  });
  await writeFile(join(dir, 'layout', 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  await writeFile(
    join(dir, 'layout', 'index.json'),
    JSON.stringify({ schemaVersion: 2, manifests: [{ ...manifest, annotations: { 'org.opencontainers.image.ref.name': 'v1' } }] }),
  );
  await rm(root, { recursive: true, force: true });
  return { digest: layerDigest, size: layerSize };
}

const msSince = (t0: number) => performance.now() - t0;

async function runPull(ctx: BenchContext): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-bench-images-'));
  ctx.defer('the scratch directory', () => rm(dir, { recursive: true, force: true }));
  const registry = await startDockerRegistry({ teardown: (fn) => ctx.defer('docker-registry', fn) }, { dir: join(dir, 'registry') });
  ctx.log(`building a ${IMAGE_MIB} MiB containerDisk`);
  const layer = await buildLayout(dir);
  const layerBytes = layer.size;
  execFileSync('skopeo', [
    'copy',
    '-q',
    '--dest-tls-verify=false',
    `oci:${join(dir, 'layout')}:v1`,
    `docker://${registry.host}/${REPO}:v1`,
  ]);
  const image = `${registry.host}/${REPO}:v1`;
  const mibS = (ms: number) => layerBytes / BYTES_PER_MiB / (ms / 1000);

  const cold: number[] = [];
  const warm: number[] = [];
  const extract: number[] = [];
  const skopeo: number[] = [];
  const curl: number[] = [];
  for (let run = 1; run <= RUNS; run++) {
    ctx.signal.throwIfAborted();
    const store = new ImageStore(join(dir, `store-${run}`));
    await store.init();
    const images = new ImageService({
      store,
      addresses: DEFAULT_DOWNLOAD_POLICY,
      localRegistries: [registry.host],
      verifyPullCredentials: true,
      maxParallelPulls: 3,
      maxImageBytes: 2 ** 34,
      log: pino({ level: 'silent' }),
    });
    try {
      let t0 = performance.now();
      const ready = await images.ensure({ image, policy: 'Always' });
      cold.push(msSince(t0));
      t0 = performance.now();
      await images.ensure({ image, policy: 'Always' });
      warm.push(msSince(t0));
      t0 = performance.now();
      await images.files(ready, [{ onlyIn: '/disk' }], { disk: true });
      extract.push(msSince(t0));
      ctx.log(
        `run ${run}: cold ${Math.round(cold.at(-1)!)} ms, warm ${Math.round(warm.at(-1)!)} ms, extract ${Math.round(extract.at(-1)!)} ms`,
      );
    } finally {
      images.close();
      await rm(store.root, { recursive: true, force: true });
    }
    const copy = join(dir, `skopeo-${run}`);
    let t0 = performance.now();
    execFileSync('skopeo', ['copy', '-q', '--src-tls-verify=false', `docker://${image}`, `oci:${copy}:v1`]);
    skopeo.push(msSince(t0));
    await rm(copy, { recursive: true, force: true });
    t0 = performance.now();
    execFileSync('curl', ['-sf', '-o', join(dir, 'curl.blob'), `${registry.base}/v2/${REPO}/blobs/${layer.digest}`]);
    curl.push(msSince(t0));
    await rm(join(dir, 'curl.blob'), { force: true });
  }
  const p50 = (s: number[]) => percentile(s, 50);
  ctx.emit('image_pull_mib', layerBytes / BYTES_PER_MiB, 'MiB');
  ctx.emit('image_pull_cold_ms_p50', p50(cold), 'ms');
  ctx.emit('image_pull_mib_s', mibS(p50(cold)), 'MiB/s');
  ctx.emit('image_pull_warm_ms_p50', p50(warm), 'ms');
  ctx.emit('image_extract_disk_ms_p50', p50(extract), 'ms');
  ctx.emit('image_pull_skopeo_mib_s', mibS(p50(skopeo)), 'MiB/s');
  ctx.emit('image_pull_curl_mib_s', mibS(p50(curl)), 'MiB/s');
  ctx.emit('image_pull_vs_skopeo_ratio', p50(skopeo) / p50(cold), 'ratio');
}

export const IMAGE_BENCHMARKS: readonly Benchmark[] = [
  {
    name: 'images.pull',
    description: `a ${IMAGE_MIB} MiB containerDisk from a loopback docker-registry: cold and warm pull, disk taken out; skopeo and curl alongside`,
    run: runPull,
  },
];
