import t from 'tap';
import { nodeImagesOf } from './node-images.js';
import type { ImageRecord } from './store.js';

const rec = (reference: string, digest: string, sizeBytes: number): ImageRecord => ({
  reference,
  repository: reference.replace(/[:@].*$/, '').replace(/:\d+$/, ''),
  digest,
  manifestDigest: digest,
  sizeBytes,
  pulledAtMs: 0,
});

t.test('each image once, named by all its references, largest first, at most the cap', async (t) => {
  const records = [
    rec('quay.io/a/disk:v1', 'sha256:aa', 100),
    rec('quay.io/a/disk@sha256:aa', 'sha256:aa', 100),
    rec('quay.io/a/disk:latest', 'sha256:aa', 100),
    rec('quay.io/b/kernel:v1', 'sha256:bb', 300),
    rec('quay.io/c/small:v1', 'sha256:cc', 10),
  ];
  t.same(nodeImagesOf(records), [
    { names: ['quay.io/b/kernel:v1'], sizeBytes: 300 },
    { names: ['quay.io/a/disk:latest', 'quay.io/a/disk:v1', 'quay.io/a/disk@sha256:aa'], sizeBytes: 100 },
    { names: ['quay.io/c/small:v1'], sizeBytes: 10 },
  ]);
  t.equal(nodeImagesOf(records, 2).length, 2);
});
