import { readdirSync, readlinkSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { waitForUnixSocket } from './wait.js';

const inotifyInstances = (): number =>
  readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`) === 'anon_inode:inotify';
    } catch {
      return false;
    }
  }).length;

/** Unix socket paths must stay under 108 bytes: not below tap's fixture dirs. */
async function shortSocketPath(t: Test, name: string): Promise<string> {
  const dir = await mkdtemp('/tmp/vkvm-wait-');
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return path.join(dir, name);
}

t.test('a socket that appears later and then accepts is waited for, without an inotify instance', async (t) => {
  const socket = await shortSocketPath(t, 's.sock');
  const before = inotifyInstances();
  const server = net.createServer((c) => c.end());
  t.teardown(() => server.close());
  const waited = waitForUnixSocket(socket, 5_000);
  setTimeout(() => server.listen(socket), 150);
  await waited;
  t.equal(inotifyInstances(), before, 'no inotify instance is made (libuv would keep it for good)');
});

t.test('no answer by the deadline is a timeout naming the socket; an abort ends the wait at once', async (t) => {
  const socket = await shortSocketPath(t, 'never.sock');
  await t.rejects(waitForUnixSocket(socket, 200), { kind: 'Timeout', message: new RegExp(`waiting for ${socket} to accept`) });
  await t.rejects(
    waitForUnixSocket(socket, 60_000, Promise.reject(new Error('the launcher exited'))),
    { message: 'the launcher exited' },
    'the abort ends it with its own error, not the deadline with a timeout',
  );
});
