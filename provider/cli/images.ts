// `vkvm images ls|pull|rm|import`: the node's image store by hand, as crictl
// and `ctr images import` manage a container runtime's. Works on the same
// store as a running agent (every write lands by rename), so images can be
// pulled ahead of time or imported on an offline node.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { DEFAULT_DOWNLOAD_POLICY } from '../../vmm/disks/download-policy.js';
import { ConfigError, DEFAULT_LOCAL_REGISTRIES } from '../config.js';
import { ImageService } from '../images/image-service.js';
import { DockerKeyring } from '../images/keyring.js';
import { importLayout } from '../images/oci-layout.js';
import { pinnedImages, PinStore } from '../images/pins.js';
import { parseReference, storeKey } from '../images/reference.js';
import { pruneStore, removeImage } from '../images/remove.js';
import { imageIdOf, ImageStore, type ImageRecord } from '../images/store.js';
import { createRootLogger } from '../log.js';

export const IMAGES_HELP = `Usage: vkvm images <ls|pull|rm|import> [flags] [args]

The node's image store: what the agent pulled for pods and VMIs, and what
was pulled or imported here. Run as root, on the node.

  ls                       list images: reference, digest, size, pinned (never garbage-collected), when pulled
  pull IMAGE               pull (always asking the registry) into the store
  rm IMAGE...              remove images, then the content no image refers to; an image
                           a pod on this node uses is refused
  import PATH              load an OCI image layout (a directory, or a tar of
                           one, gzip or zstd compressed or not), as ctr images import

Flags:
  --state-dir DIR              the agent's state directory (default /var/lib/vkvm)
  --image-store-dir DIR        the image store (default <state-dir>/images)
  --creds USER:PASSWORD        pull: credentials for the image's registry
  --insecure-registry HOST[:PORT]  pull: a registry that may answer plain HTTP (repeatable;
                               loopback registries always may)
  --registry-ca-file FILE      pull: a PEM CA trusted besides the system's (repeatable)
  --name REFERENCE             import: the name of a layout's single image, when its
                               index.json carries none
  --max-mib N                  largest image accepted (default 20480)
`;

const OPTIONS = {
  'state-dir': { type: 'string' },
  'image-store-dir': { type: 'string' },
  creds: { type: 'string' },
  'insecure-registry': { type: 'string', multiple: true },
  'registry-ca-file': { type: 'string', multiple: true },
  name: { type: 'string' },
  'max-mib': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Blobs a pull or import still writes when `rm` prunes are younger than this, and kept. */
const PRUNE_MIN_AGE_MS = 10 * 60_000;

function humanBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${i ? n.toFixed(1) : n}${units[i]}`;
}

function table(recs: ImageRecord[]): string {
  const rows = [
    // PINNED as crictl's: never garbage-collected.
    ['IMAGE', 'DIGEST', 'SIZE', 'PINNED', 'PULLED'],
    ...recs.map((r) => [
      r.reference,
      r.digest.slice(0, 19),
      humanBytes(r.sizeBytes),
      String(!!r.pinned),
      new Date(r.pulledAtMs).toISOString().replace(/\.\d+Z$/, 'Z'),
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('   ')).join('\n') + '\n';
}

export async function imagesCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (!sub || sub === '--help' || sub === '-h' || sub === 'help') {
    process.stdout.write(IMAGES_HELP);
    return sub ? 0 : 2;
  }
  const { values, positionals } = parseArgs({ args: rest, options: OPTIONS, allowPositionals: true, strict: true });
  if (values.help) {
    process.stdout.write(IMAGES_HELP);
    return 0;
  }
  const maxMiB = Number(values['max-mib'] ?? 20480);
  if (!Number.isInteger(maxMiB) || maxMiB < 1) throw new ConfigError('--max-mib', 'must be a positive integer');
  const store = new ImageStore(values['image-store-dir'] ?? `${values['state-dir'] ?? '/var/lib/vkvm'}/images`);
  await store.init();
  switch (sub) {
    case 'ls':
    case 'list':
      process.stdout.write(table(await store.records()));
      return 0;
    case 'pull':
      if (positionals.length !== 1) throw new ConfigError('images pull', 'takes one image');
      return pull(store, positionals[0]!, values, maxMiB * 2 ** 20);
    case 'rm':
      if (!positionals.length) throw new ConfigError('images rm', 'takes at least one image');
      return rm(store, positionals);
    case 'import': {
      if (positionals.length !== 1) throw new ConfigError('images import', 'takes one path');
      const imported = await importLayout(positionals[0]!, store, {
        maxImageBytes: maxMiB * 2 ** 20,
        ...(values.name ? { name: values.name } : {}),
      });
      for (const r of imported) process.stdout.write(`imported ${r.reference} (${r.digest})\n`);
      return 0;
    }
    default:
      throw new ConfigError('images', `unknown subcommand ${JSON.stringify(sub)}; one of ls, pull, rm, import`);
  }
}

async function pull(
  store: ImageStore,
  image: string,
  values: { creds?: string; 'insecure-registry'?: string[]; 'registry-ca-file'?: string[] },
  maxImageBytes: number,
): Promise<number> {
  const ref = parseReference(image);
  const keyring = new DockerKeyring();
  if (values.creds) {
    const colon = values.creds.indexOf(':');
    if (colon < 0) throw new ConfigError('--creds', 'want USER:PASSWORD');
    keyring.add(ref.domain, {
      username: values.creds.slice(0, colon),
      password: values.creds.slice(colon + 1),
      from: '--creds',
    });
  }
  const images = new ImageService({
    store,
    // The operator's own pull: the registry typed may be on this node; where it redirects is checked as for the agent.
    addresses: DEFAULT_DOWNLOAD_POLICY,
    localRegistries: [...DEFAULT_LOCAL_REGISTRIES, ref.domain],
    verifyPullCredentials: false,
    insecureRegistries: values['insecure-registry'] ?? [],
    registryCaPems: await Promise.all((values['registry-ca-file'] ?? []).map((f) => readFile(f, 'utf8'))),
    maxParallelPulls: 1,
    maxImageBytes,
    // Progress on stderr; stdout carries only the result.
    log: createRootLogger('info', 2),
  });
  try {
    const ready = await images.ensure({ image, policy: 'Always', keyring });
    process.stdout.write(`${ready.imageID}\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`vkvm: ${(err as Error).message}\n`);
    return 1;
  } finally {
    images.close();
  }
}

async function rm(store: ImageStore, images: string[]): Promise<number> {
  let missing = 0;
  const pins = new PinStore(store.pinsDir);
  for (const image of images) {
    const rec = await store.record(storeKey(parseReference(image)));
    const users = rec && pinnedImages(await pins.list(), await store.records()).get(imageIdOf(rec));
    if (users) {
      process.stderr.write(
        `vkvm: ${image} is in use by pod ${users.join(', ')} on this node; it is kept until ${users.length > 1 ? 'those pods are' : 'that pod is'} gone\n`,
      );
      missing++;
      continue;
    }
    const removed = await removeImage(store, image);
    if (!removed.length) {
      process.stderr.write(`vkvm: no image ${image} in the store\n`);
      missing++;
    }
    for (const r of removed) process.stdout.write(`deleted ${r}\n`);
  }
  const pruned = await pruneStore(store, { minAgeMs: PRUNE_MIN_AGE_MS });
  if (pruned.blobs) process.stdout.write(`freed ${humanBytes(pruned.bytes)} (${pruned.blobs} blobs)\n`);
  return missing ? 1 : 0;
}
