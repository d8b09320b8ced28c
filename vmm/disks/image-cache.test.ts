// The shared download of a URL image: it goes on while one caller still wants
// it, and stops (connection closed, no partial file left) when the last gives up.
import { createServer, type ServerResponse } from 'node:http';
import { readdir } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { recordingLog } from '../testing/log.js';
import { rejection } from '../testing/rejection.js';
import { DEFAULT_DOWNLOAD_POLICY } from './download-policy.js';
import { cachedImage, downloadsInFlight } from './image-cache.js';

t.test('a download nobody wants any more is aborted and leaves nothing; one still wanted goes on', async (t) => {
  let closed = 0;
  const open: ServerResponse[] = [];
  // 127.0.0.2 stands for an allowed remote server that streams slowly and never ends.
  const server = createServer((req, res) => {
    res.writeHead(200);
    res.write(Buffer.alloc(1024));
    open.push(res);
    req.socket.on('close', () => closed++);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.2', resolve));
  t.teardown(() => {
    for (const res of open) res.destroy();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const url = `http://127.0.0.2:${(server.address() as AddressInfo).port}/disk.img`;
  const cacheDir = join(t.testdir(), 'cache');
  const policy = { ...DEFAULT_DOWNLOAD_POLICY, allowedCidrs: ['127.0.0.2/32'] };
  const { log } = recordingLog();
  const first = new AbortController();
  const second = new AbortController();
  const a = cachedImage(url, cacheDir, policy, log, first.signal);
  const b = cachedImage(url, cacheDir, policy, log, second.signal);
  while (open.length === 0) await new Promise((r) => setTimeout(r, 5));
  first.abort(new Error('pod a deleted'));
  const firstGaveUp = ((await rejection(a)) as Error).message;
  await new Promise((r) => setTimeout(r, 50));
  const afterFirst = { closed, inFlight: downloadsInFlight().size, requests: open.length };
  second.abort(new Error('pod b deleted'));
  const secondGaveUp = ((await rejection(b)) as Error).message;
  while (downloadsInFlight().size > 0 || closed === 0) await new Promise((r) => setTimeout(r, 5));
  t.same(
    { firstGaveUp, afterFirst, secondGaveUp, closed, left: await readdir(cacheDir) },
    {
      firstGaveUp: 'pod a deleted',
      afterFirst: { closed: 0, inFlight: 1, requests: 1 },
      secondGaveUp: 'pod b deleted',
      closed: 1,
      left: [],
    },
  );
});
