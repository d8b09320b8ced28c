import t from 'tap';
import { MANIFEST_ACCEPT, MEDIA_TYPES, parseManifest, selectPlatform, type Descriptor } from './manifest.js';

const D = (n: number) => `sha256:${String(n).repeat(64).slice(0, 64)}`;
const doc = (o: object) => Buffer.from(JSON.stringify(o));
const layer = (mediaType: string = MEDIA_TYPES.ociLayerGzip) => ({ mediaType, digest: D(2), size: 10 });
const manifest = (layers = [layer()], extra: object = {}) =>
  doc({
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.ociManifest,
    config: { mediaType: MEDIA_TYPES.ociConfig, digest: D(1), size: 2 },
    layers,
    ...extra,
  });

t.test('every manifest and index type is asked for (distribution refuses an index otherwise)', async (t) => {
  t.same(
    MANIFEST_ACCEPT.split(', ').sort(),
    [MEDIA_TYPES.dockerList, MEDIA_TYPES.dockerManifest, MEDIA_TYPES.ociIndex, MEDIA_TYPES.ociManifest].sort(),
  );
});

t.test('manifests and indexes are parsed; what vkvm cannot use is refused, saying why', async (t) => {
  t.match(parseManifest(manifest()), { kind: 'manifest', config: { digest: D(1) }, layers: [{ digest: D(2) }] });
  t.match(
    parseManifest(doc({ schemaVersion: 2, manifests: [] })),
    { kind: 'index', mediaType: MEDIA_TYPES.ociIndex },
    'an index without mediaType (OCI allows it)',
  );
  t.match(
    parseManifest(doc({ schemaVersion: 2, config: { mediaType: 'x', digest: D(1), size: 1 }, layers: [] }), MEDIA_TYPES.dockerManifest),
    { kind: 'manifest', mediaType: MEDIA_TYPES.dockerManifest },
    'the type from Content-Type',
  );
  const refused: Array<[string, Buffer, string | undefined, RegExp]> = [
    ['schema1 by document', doc({ schemaVersion: 1, fsLayers: [] }), undefined, /schema1/],
    ['schema1 by Content-Type', doc({}), MEDIA_TYPES.dockerSchema1Signed, /schema1/],
    ['not JSON', Buffer.from('<html>'), undefined, /not JSON/],
    ['a foreign layer', manifest([layer('application/vnd.docker.image.rootfs.foreign.diff.tar.gzip')]), undefined, /cannot unpack/],
    ['a sha512 digest', manifest([{ ...layer(), digest: `sha512:${'a'.repeat(128)}` }]), undefined, /sha256 digests only/],
    ['a negative size', manifest([{ ...layer(), size: -1 }]), undefined, /no valid size/],
    [
      'an artifact type',
      doc({ schemaVersion: 2, mediaType: 'application/vnd.example+json' }),
      undefined,
      /unsupported manifest media type/,
    ],
  ];
  for (const [what, body, type, message] of refused)
    t.throws(() => parseManifest(body, type), { name: 'ImageContentError', message }, what);
});

t.test('the platform: linux/amd64, attestation entries skipped; none names what there is', async (t) => {
  const entry = (architecture: string, extra: Partial<Descriptor> = {}): Descriptor => ({
    mediaType: MEDIA_TYPES.ociManifest,
    digest: D(architecture.length),
    size: 1,
    platform: { os: 'linux', architecture },
    ...extra,
  });
  const attestation = {
    ...entry('unknown'),
    platform: { os: 'unknown', architecture: 'unknown' },
    annotations: { 'vnd.docker.reference.type': 'attestation-manifest' },
  };
  t.equal(selectPlatform([attestation, entry('arm64'), entry('amd64')]).platform?.architecture, 'amd64');
  t.throws(
    () =>
      selectPlatform([attestation, entry('arm64', { platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } }), entry('s390x')]),
    {
      message: 'no linux/amd64 image in the index (it has: linux/arm64/v8, linux/s390x)',
    },
  );
});
