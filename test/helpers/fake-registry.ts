// A small distribution-API registry in memory, for the unit tests of edge
// cases a real registry will not produce on demand: bearer tokens from a
// token service, corrupted blobs, lying digest headers, blobs redirected to
// another origin, schema1 manifests. It logs every request it sees. The
// acceptance tests use Debian's real docker-registry instead.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Test } from 'tap';
import { digestOf, imageBlobs, type Blob, type TestImage } from './oci.js';

export type FakeAuth =
  { kind: 'none' } | { kind: 'basic'; user: string; password: string } | { kind: 'bearer'; user?: string; password?: string };

interface Manifest {
  mediaType: string;
  data: Buffer;
}

export interface FakeRegistry {
  host: string;
  base: string;
  /** "GET /v2/..." lines, and the Authorization each carried (or '-'). */
  requests: Array<{ line: string; authorization: string }>;
  addImage(repo: string, tag: string, image: TestImage): void;
  addIndex(repo: string, tag: string, index: Blob, images: TestImage[]): void;
  addManifest(repo: string, ref: string, mediaType: string, data: Buffer): void;
  /** Serves other bytes (of the same length) for this blob. */
  corrupt(digest: string): void;
  /** Sends this Docker-Content-Digest for every manifest instead of the true one. */
  lieAboutDigests(digest: string): void;
  /** Blob GETs answer 307 to `target` + the same path. */
  redirectBlobsTo(target: string): void;
  /** Holds every blob response until `release` is called. */
  holdBlobs(): { release: () => void };
}

async function listen(
  t: Test,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; base: string; host: string }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { server, base: `http://${host}`, host };
}

export async function startFakeRegistry(t: Test, auth: FakeAuth = { kind: 'none' }): Promise<FakeRegistry> {
  const manifests = new Map<string, Manifest>();
  const blobs = new Map<string, Buffer>();
  const corrupted = new Set<string>();
  const tokens = new Set<string>();
  const requests: FakeRegistry['requests'] = [];
  let digestLie: string | undefined;
  let redirect: string | undefined;
  let hold: Promise<void> | undefined;

  const { base, host } = await listen(t, (req, res) => void handle(req, res));
  const basicOk = (h: string | undefined, user?: string, password?: string) =>
    h === `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', base);
    const authorization = req.headers.authorization;
    requests.push({ line: `${req.method} ${url.pathname}`, authorization: authorization ?? '-' });
    if (url.pathname === '/token') {
      if (auth.kind === 'bearer' && auth.user && !basicOk(authorization, auth.user, auth.password)) return void res.writeHead(401).end();
      const token = `tok-${tokens.size}-${url.searchParams.get('scope')}`;
      tokens.add(token);
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token, expires_in: 300 }));
    }
    const authorized =
      auth.kind === 'none' ||
      (auth.kind === 'basic' && basicOk(authorization, auth.user, auth.password)) ||
      (auth.kind === 'bearer' && tokens.has((authorization ?? '').replace(/^Bearer /, '')));
    if (!authorized) {
      const challenge =
        auth.kind === 'basic'
          ? 'Basic realm="fake"'
          : `Bearer realm="${base}/token",service="fake",scope="repository:${url.pathname.split('/').slice(2, -2).join('/')}:pull"`;
      return void res
        .writeHead(401, { 'www-authenticate': challenge, 'content-type': 'application/json' })
        .end(JSON.stringify({ errors: [{ code: 'UNAUTHORIZED', message: 'authentication required' }] }));
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(url.pathname);
    if (!m) return void res.writeHead(url.pathname === '/v2/' ? 200 : 404).end();
    const [, repo, kind, ref] = m as unknown as [string, string, string, string];
    if (kind === 'manifests') {
      const found = manifests.get(`${repo}:${ref}`);
      if (!found)
        return void res
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: 'manifest unknown' }] }));
      // As distribution: an index only to a client that accepts one.
      if (found.mediaType.includes('index') || found.mediaType.includes('list')) {
        if (!(req.headers.accept ?? '').includes(found.mediaType)) return void res.writeHead(404).end();
      }
      return void res
        .writeHead(200, {
          'content-type': found.mediaType,
          'docker-content-digest': digestLie ?? digestOf(found.data),
          'content-length': found.data.length,
        })
        .end(found.data);
    }
    const data = blobs.get(ref);
    if (!data)
      return void res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ errors: [{ code: 'BLOB_UNKNOWN', message: 'blob unknown' }] }));
    if (redirect) return void res.writeHead(307, { location: `${redirect}${url.pathname}` }).end();
    await hold;
    const body = corrupted.has(ref) ? Buffer.from(data.map((b) => b ^ 0xff)) : data;
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length }).end(body);
  }

  const registry: FakeRegistry = {
    host,
    base,
    requests,
    addManifest: (repo, ref, mediaType, data) => void manifests.set(`${repo}:${ref}`, { mediaType, data }),
    addImage(repo, tag, image) {
      for (const b of imageBlobs(image)) blobs.set(b.digest, b.data);
      registry.addManifest(repo, tag, image.manifest.mediaType, image.manifest.data);
      registry.addManifest(repo, image.manifest.digest, image.manifest.mediaType, image.manifest.data);
    },
    addIndex(repo, tag, index, images) {
      for (const image of images) registry.addImage(repo, image.manifest.digest, image);
      registry.addManifest(repo, tag, index.mediaType, index.data);
      registry.addManifest(repo, index.digest, index.mediaType, index.data);
    },
    corrupt: (digest) => void corrupted.add(digest),
    lieAboutDigests: (digest) => void (digestLie = digest),
    redirectBlobsTo: (target) => void (redirect = target),
    holdBlobs() {
      let release!: () => void;
      hold = new Promise<void>((resolve) => (release = resolve));
      return { release };
    },
  };
  return registry;
}

/** A plain server that serves the same blobs a registry does, recording the Authorization it gets (blob storage behind a redirect). */
export async function startBlobStorage(t: Test, blobs: Blob[]) {
  const seen: string[] = [];
  const source = new Map(blobs.map((b) => [b.digest, b.data]));
  const { base } = await listen(t, (req, res) => {
    seen.push(req.headers.authorization ?? '-');
    const digest = (req.url ?? '').split('/').pop() ?? '';
    const data = source.get(digest);
    if (!data) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-length': data.length }).end(data);
  });
  return { base, seen };
}
