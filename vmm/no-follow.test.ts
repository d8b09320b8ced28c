import { execFileSync } from 'node:child_process';
import {
  chownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { chownNoFollow, connectNoFollow, UnsafePathError } from './no-follow.js';

const ME = process.getuid!();
const OTHER_UID = 3_999_999;

/** A listening unix socket that counts the connections it accepted. */
async function listen(t: Test, path: string): Promise<{ server: Server; accepted: () => number }> {
  let accepted = 0;
  const server = createServer((c) => {
    accepted++;
    c.end('hello');
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { server, accepted: () => accepted };
}

/** A scratch dir with a short path: a unix socket path has at most 107 bytes, more than t.testdir leaves. */
function shortDir(t: Test, files: Record<string, string | Record<string, string>> = {}): string {
  const dir = mkdtempSync('/tmp/vkvm-nofollow-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const [name, content] of Object.entries(files)) {
    if (typeof content === 'string') writeFileSync(join(dir, name), content);
    else mkdirSync(join(dir, name));
  }
  return dir;
}

function firstBytes(socket: Socket): Promise<string> {
  return new Promise((resolve) => socket.once('data', (d: Buffer) => (socket.destroy(), resolve(d.toString()))));
}

t.test('a real socket owned by an allowed uid connects', async (t) => {
  const dir = shortDir(t);
  const vm = await listen(t, join(dir, 'vnc.sock'));
  const socket = await connectNoFollow(join(dir, 'vnc.sock'), { owners: [ME] });
  t.same({ got: await firstBytes(socket), accepted: vm.accepted() }, { got: 'hello', accepted: 1 }, 'connected to the socket itself');
});

t.test('a symlink planted in place of the socket is refused and never connected', async (t) => {
  const dir = shortDir(t, { qemu: {} });
  const hostService = await listen(t, join(dir, 'root-service.sock'));
  symlinkSync(join(dir, 'root-service.sock'), join(dir, 'qemu', 'vnc.sock'));
  await t.rejects(connectNoFollow(join(dir, 'qemu', 'vnc.sock'), { owners: [ME] }), {
    constructor: UnsafePathError,
    message: `${join(dir, 'qemu', 'vnc.sock')} is a symlink; refusing to follow it`,
  });
  t.equal(hostService.accepted(), 0, 'the link target saw no connection');
});

t.test('a socket owned by another uid is refused', async (t) => {
  const dir = shortDir(t);
  const other = await listen(t, join(dir, 'vnc.sock'));
  chownSync(join(dir, 'vnc.sock'), OTHER_UID, OTHER_UID);
  await t.rejects(connectNoFollow(join(dir, 'vnc.sock'), { owners: [ME, 12345] }), {
    constructor: UnsafePathError,
    message: `${join(dir, 'vnc.sock')} is owned by uid ${OTHER_UID}, not ${ME} or 12345; refusing to connect`,
  });
  t.equal(other.accepted(), 0, 'no connection made');
});

t.test('a hard link to another socket, or a file that is no socket, is refused', async (t) => {
  const dir = shortDir(t, { 'plain.sock': 'x' });
  const target = await listen(t, join(dir, 'service.sock'));
  linkSync(join(dir, 'service.sock'), join(dir, 'linked.sock'));
  await t.rejects(connectNoFollow(join(dir, 'linked.sock'), { owners: [ME] }), {
    constructor: UnsafePathError,
    message: /has 2 hard links/,
  });
  await t.rejects(connectNoFollow(join(dir, 'plain.sock'), { owners: [ME] }), {
    constructor: UnsafePathError,
    message: /is not a unix socket/,
  });
  t.equal(target.accepted(), 0, 'no connection made');
});

t.test('a missing socket keeps ENOENT', async (t) => {
  await t.rejects(connectNoFollow(join(shortDir(t), 'vnc.sock'), { owners: [ME] }), { code: 'ENOENT' });
});

t.test('chownNoFollow changes a regular file or directory, never a link target', async (t) => {
  const dir = t.testdir({ disks: { 'root.qcow2': 'data' }, host: { shadow: 'secret' } });
  const owner = { uid: OTHER_UID, gid: OTHER_UID };
  await chownNoFollow(join(dir, 'disks'), owner, 0o700);
  await chownNoFollow(join(dir, 'disks', 'root.qcow2'), owner, 0o600);
  const shape = (p: string) => ({ uid: statSync(p).uid, mode: statSync(p).mode & 0o7777 });
  t.same(
    [shape(join(dir, 'disks')), shape(join(dir, 'disks', 'root.qcow2'))],
    [
      { uid: OTHER_UID, mode: 0o700 },
      { uid: OTHER_UID, mode: 0o600 },
    ],
  );

  mkdirSync(join(dir, 'real'));
  chownSync(join(dir, 'host', 'shadow'), 0, 0);
  const before = statSync(join(dir, 'host', 'shadow'));
  symlinkSync(join(dir, 'host', 'shadow'), join(dir, 'disks', 'seed.iso'));
  symlinkSync(join(dir, 'real'), join(dir, 'disks', 'dir-link'));
  linkSync(join(dir, 'host', 'shadow'), join(dir, 'disks', 'hard.qcow2'));
  await t.rejects(chownNoFollow(join(dir, 'disks', 'seed.iso'), owner, 0o600), {
    constructor: UnsafePathError,
    message: `${join(dir, 'disks', 'seed.iso')} is a symlink; refusing to follow it`,
  });
  await t.rejects(chownNoFollow(join(dir, 'disks', 'dir-link'), owner, 0o700), { constructor: UnsafePathError, message: /is a symlink/ });
  await t.rejects(chownNoFollow(join(dir, 'disks', 'hard.qcow2'), owner, 0o600), { constructor: UnsafePathError, message: /2 hard links/ });
  const after = statSync(join(dir, 'host', 'shadow'));
  t.same(
    { uid: after.uid, mode: after.mode, text: readFileSync(join(dir, 'host', 'shadow'), 'utf8'), real: statSync(join(dir, 'real')).uid },
    { uid: before.uid, mode: before.mode, text: 'secret', real: ME },
    'the targets are unchanged',
  );
  t.ok(lstatSync(join(dir, 'disks', 'seed.iso')).isSymbolicLink(), 'the link is left as it was');
});

t.test('chownNoFollow refuses a FIFO without blocking on it', async (t) => {
  const dir = shortDir(t);
  execFileSync('mkfifo', [join(dir, 'pipe')]);
  await t.rejects(chownNoFollow(join(dir, 'pipe'), { uid: OTHER_UID, gid: OTHER_UID }, 0o600), {
    constructor: UnsafePathError,
    message: /neither a regular file nor a directory/,
  });
});
