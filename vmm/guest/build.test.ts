// Boots the vkvm test guest under plain QEMU (TCG) and checks the things the
// rest of vkvm relies on: boot marker on the serial port, a working serial
// shell with job control, the guest agent (guest-ping, guest-exec), ACPI
// power-button shutdown via QMP system_powerdown, and `poweroff -f`.

import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import * as fs from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { ensureTestGuest, GUEST_AGENT_PORT, type TestGuest } from './build.js';

const QEMU = process.env.VKVM_QEMU ?? 'qemu-system-x86_64';
const BOOT_TIMEOUT_MS = 120_000; // TCG on a busy machine; ~10 s is typical

type Test = Pick<typeof t, 'teardown' | 'fail'>;

/** Resolves when check() returns a value; re-checked on every `emitter` 'change'. */
function waitUntil<T>(
  emitter: EventEmitter,
  check: () => T | undefined,
  timeoutMs: number,
  what: string,
  describe: () => string = () => '',
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const done = (fn: () => void) => {
      clearTimeout(timer);
      emitter.off('change', onChange);
      emitter.off('close', onClose);
      fn();
    };
    const onChange = () => {
      let v: T | undefined;
      try {
        v = check();
      } catch (err) {
        done(() => reject(err));
        return;
      }
      if (v !== undefined) done(() => resolve(v as T));
    };
    const onClose = () => {
      onChange();
      done(() => reject(new Error(`closed while waiting for ${what}${describe()}`)));
    };
    const timer = setTimeout(
      () => done(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}${describe()}`))),
      timeoutMs,
    );
    emitter.on('change', onChange);
    emitter.on('close', onClose);
    onChange();
  });
}

/** Newline-delimited JSON over a unix socket (QMP and the guest agent). */
class JsonChannel extends EventEmitter {
  private buf = '';
  private queue: Record<string, unknown>[] = [];
  readonly seen: Record<string, unknown>[] = [];
  closed = false;

  private constructor(private readonly sock: net.Socket) {
    super();
    sock.setEncoding('latin1');
    sock.on('data', (chunk: string) => {
      this.buf += chunk;
      let nl: number;
      while ((nl = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, nl).replace(/\xff/g, '').trim();
        this.buf = this.buf.slice(nl + 1);
        if (!line) continue;
        try {
          const msg = JSON.parse(line) as Record<string, unknown>;
          this.queue.push(msg);
          this.seen.push(msg);
        } catch {
          /* not JSON: ignore */
        }
      }
      this.emit('change');
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      this.closed = true;
      this.emit('close');
    });
  }

  static async connect(socketPath: string, timeoutMs: number): Promise<JsonChannel> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const sock = await new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect(socketPath);
          s.once('connect', () => resolve(s));
          s.once('error', reject);
        });
        return new JsonChannel(sock);
      } catch (err) {
        // QEMU creates its listening sockets during startup; retry until then.
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  send(msg: unknown): void {
    this.sock.write(JSON.stringify(msg) + '\n');
  }

  /** Consume messages in order until one matches; earlier ones are dropped. */
  next(pred: (m: Record<string, unknown>) => boolean, timeoutMs: number, what: string): Promise<Record<string, unknown>> {
    return waitUntil(
      this,
      () => {
        while (this.queue.length) {
          const m = this.queue.shift()!;
          if (pred(m)) return m;
        }
        if (this.closed) throw new Error(`channel closed waiting for ${what}`);
        return undefined;
      },
      timeoutMs,
      what,
    );
  }

  async call(execute: string, args: unknown, timeoutMs: number): Promise<unknown> {
    this.send(args === undefined ? { execute } : { execute, arguments: args });
    const m = await this.next((m) => 'return' in m || 'error' in m, timeoutMs, `${execute} reply`);
    if ('error' in m) throw new Error(`${execute}: ${JSON.stringify(m.error)}`);
    return m.return;
  }

  close(): void {
    this.sock.destroy();
  }
}

class BootedQemu extends EventEmitter {
  serial = '';
  readonly startedAt = Date.now();
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  readonly exited: Promise<void>;

  constructor(
    readonly proc: ChildProcess,
    readonly dir: string,
  ) {
    super();
    const onData = (d: Buffer) => {
      this.serial += d.toString('latin1');
      this.emit('change');
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', onData);
    this.exited = new Promise((resolve) => {
      proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        this.emit('change');
        this.emit('close');
        resolve();
      });
    });
  }

  private tail = () => `\n--- serial tail ---\n${this.serial.slice(-2000)}`;

  /** Wait for `re` in serial output after offset `from`; returns the end offset of the match. */
  waitSerial(re: RegExp, from: number, timeoutMs: number): Promise<number> {
    return waitUntil(
      this,
      () => {
        const m = new RegExp(re.source, re.flags.replace('g', '') + 'g');
        m.lastIndex = from;
        const hit = m.exec(this.serial);
        return hit ? hit.index + hit[0].length : undefined;
      },
      timeoutMs,
      `serial ${re}`,
      this.tail,
    );
  }

  type(text: string): number {
    const at = this.serial.length;
    this.proc.stdin!.write(text);
    return at;
  }

  waitExit(timeoutMs: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    return waitUntil(this, () => this.exit, timeoutMs, 'QEMU to exit', this.tail);
  }
}

async function bootGuest(t: Test, guest: TestGuest): Promise<BootedQemu> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'vkvm-guest-'));
  const qga = path.join(dir, 'qga.sock');
  const qmp = path.join(dir, 'qmp.sock');
  const args = [
    '-accel',
    'tcg',
    '-m',
    '128',
    '-nographic',
    '-no-user-config',
    '-nic',
    'none',
    '-kernel',
    guest.kernelPath,
    '-initrd',
    guest.initrdPath,
    '-append',
    guest.cmdline,
    '-chardev',
    `socket,path=${qga},server=on,wait=off,id=qga0`,
    '-device',
    'virtio-serial',
    '-device',
    `virtserialport,chardev=qga0,name=${GUEST_AGENT_PORT}`,
    '-qmp',
    `unix:${qmp},server=on,wait=off`,
  ];
  const proc = spawn(QEMU, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const vm = new BootedQemu(proc, dir);
  t.teardown(async () => {
    if (!vm.exit) {
      proc.kill('SIGKILL');
      await vm.exited;
    }
    await fs.rm(dir, { recursive: true, force: true });
  });
  proc.on('error', (err) => t.fail(`spawn ${QEMU}: ${err.message}`));
  return vm;
}

async function agentSync(agent: JsonChannel, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  // qemu-ga may not have opened the port yet; retry guest-sync with fresh ids
  // and ignore replies to older attempts.
  for (;;) {
    const id = Math.floor(Math.random() * 2 ** 31);
    agent.send({ execute: 'guest-sync', arguments: { id } });
    try {
      await agent.next((m) => m.return === id, Math.max(1, Math.min(5_000, deadline - Date.now())), `guest-sync ${id}`);
      return;
    } catch (err) {
      if (Date.now() >= deadline) throw err;
    }
  }
}

let guest: TestGuest;

t.before(async () => {
  guest = await ensureTestGuest({ log: (m) => t.comment(m) });
});

t.test('cache: concurrent builders share one complete entry', async (t) => {
  t.setTimeout(120_000);
  const cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'vkvm-guest-cache-'));
  t.teardown(() => fs.rm(cacheDir, { recursive: true, force: true }));
  const results = await Promise.all([1, 2, 3].map(() => ensureTestGuest({ cacheDir })));
  for (const r of results) t.same(r, results[0], 'same result for every caller');
  const entries = await fs.readdir(cacheDir);
  t.same(entries.filter((e) => !e.startsWith('.tmp-')).length, 1, 'one cache entry');
  t.same(
    entries.filter((e) => e.startsWith('.tmp-')),
    [],
    'no temp dirs left behind',
  );
  const entry = path.dirname(results[0]!.initrdPath);
  t.same((await fs.readdir(entry)).sort(), ['initrd.img', 'manifest.json', path.basename(results[0]!.kernelPath)].sort());
  t.equal(path.basename(entry), path.basename(path.dirname(guest.initrdPath)), 'key does not depend on cacheDir');
  const again = await ensureTestGuest({ cacheDir });
  t.same(again, results[0], 'second call is a cache hit with the same paths');

  // The kernel is the PVH-bootable ELF vmlinux unpacked from the Debian
  // bzImage (skips in-guest decompression); pvh:false keeps the bzImage.
  const head = async (p: string, n: number) => {
    const fh = await fs.open(p, 'r');
    try {
      const b = Buffer.alloc(n);
      await fh.read(b, 0, n, 0);
      return b;
    } finally {
      await fh.close();
    }
  };
  t.equal((await head(results[0]!.kernelPath, 4)).toString('latin1'), '\x7fELF', 'default kernel is an ELF vmlinux');
  const bz = await ensureTestGuest({ cacheDir, pvh: false });
  t.not(path.dirname(bz.kernelPath), path.dirname(results[0]!.kernelPath), 'pvh:false is its own cache entry');
  t.equal((await head(bz.kernelPath, 0x206)).toString('latin1', 0x202, 0x206), 'HdrS', 'pvh:false keeps the bzImage');
});

t.test('boot, serial shell, guest agent, ACPI powerdown', async (t) => {
  t.setTimeout(300_000);
  const vm = await bootGuest(t, guest);
  const qmp = await JsonChannel.connect(path.join(vm.dir, 'qmp.sock'), 30_000);
  t.teardown(() => qmp.close());
  await qmp.next((m) => 'QMP' in m, 30_000, 'QMP greeting');
  await qmp.call('qmp_capabilities', undefined, 10_000);

  const afterMarker = await vm.waitSerial(new RegExp(`^${guest.bootMarker}\\r?$`, 'm'), 0, BOOT_TIMEOUT_MS);
  const bootMs = Date.now() - vm.startedAt;
  const uptime = /userspace up at ([\d.]+)s/.exec(vm.serial)?.[1];
  t.pass(`boot marker after ${(bootMs / 1000).toFixed(1)} s (guest uptime ${uptime ?? '?'} s)`);

  // Serial root shell.
  await vm.waitSerial(/vkvm-guest:\S*# /, afterMarker, 60_000);
  let from = vm.type('echo hello-$((6*7))\n');
  await vm.waitSerial(/^hello-42\r?$/m, from, 30_000);
  t.pass('serial shell answered hello-42');
  from = vm.type('case $- in *m*) echo jobctl-$((1+1))-on;; *) echo jobctl-$((1+1))-off;; esac\n');
  const jc = await vm.waitSerial(/^jobctl-2-o(n|ff)\r?$/m, from, 30_000);
  t.match(vm.serial.slice(from, jc), /jobctl-2-on/, 'serial shell has job control');

  // Guest agent.
  const agent = await JsonChannel.connect(path.join(vm.dir, 'qga.sock'), 30_000);
  t.teardown(() => agent.close());
  const syncStart = Date.now();
  await agentSync(agent, 60_000);
  t.pass(`guest-sync answered ${Date.now() - syncStart} ms after connecting`);
  t.same(await agent.call('guest-ping', undefined, 10_000), {}, 'guest-ping');
  const exec = (await agent.call(
    'guest-exec',
    { path: '/bin/sh', arg: ['-c', 'echo out-$((6*7)); echo err-1 >&2; exit 7'], 'capture-output': true },
    10_000,
  )) as { pid: number };
  t.type(exec.pid, 'number', 'guest-exec returns a pid');
  const deadline = Date.now() + 30_000;
  let status: { exited: boolean; exitcode?: number; 'out-data'?: string; 'err-data'?: string };
  for (;;) {
    status = (await agent.call('guest-exec-status', { pid: exec.pid }, 10_000)) as typeof status;
    if (status.exited) break;
    if (Date.now() > deadline) throw new Error('guest-exec-status never reported exited');
    await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  t.equal(status.exitcode, 7, 'real exit code');
  t.equal(Buffer.from(status['out-data'] ?? '', 'base64').toString(), 'out-42\n', 'captured stdout');
  t.equal(Buffer.from(status['err-data'] ?? '', 'base64').toString(), 'err-1\n', 'captured stderr');

  // ACPI power button.
  const downAt = Date.now();
  await qmp.call('system_powerdown', undefined, 10_000);
  const exit = await vm.waitExit(60_000);
  t.same(exit, { code: 0, signal: null }, 'QEMU exited cleanly');
  t.pass(`system_powerdown → QEMU exit in ${((Date.now() - downAt) / 1000).toFixed(1)} s`);
  t.ok(
    qmp.seen.some((m) => m.event === 'SHUTDOWN' && (m.data as { guest?: boolean } | undefined)?.guest === true),
    'QMP reported a guest-initiated SHUTDOWN',
  );
});

t.test('poweroff -f from the serial shell ends QEMU', async (t) => {
  t.setTimeout(300_000);
  const vm = await bootGuest(t, guest);
  const afterMarker = await vm.waitSerial(new RegExp(`^${guest.bootMarker}\\r?$`, 'm'), 0, BOOT_TIMEOUT_MS);
  await vm.waitSerial(/vkvm-guest:\S*# /, afterMarker, 60_000);
  vm.type('poweroff -f\n');
  const exit = await vm.waitExit(60_000);
  t.same(exit, { code: 0, signal: null }, 'QEMU exited cleanly');
});
