// A read-only NBD export on a unix socket, so qemu-img can read a source
// that is still arriving (growing-file.ts): a qcow2 needs random access,
// which a pipe cannot give, and a plain file would read its not-yet-written
// tail as zeroes. The socket lives in a fresh 0700 directory, so only this
// node's root reaches it. The protocol subset qemu's NBD client needs
// (fixed newstyle, NBD_OPT_GO, simple replies to NBD_CMD_READ and
// NBD_CMD_DISC; https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md),
// hand-written: no kept NBD server library is on npm, and qemu-nbd serves
// only files.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** What the export serves: `read` fills the buffer from `offset` or rejects. */
export interface ExportSource {
  readonly size: number;
  read(into: Buffer, offset: number): Promise<void>;
}

const NBDMAGIC = 0x4e42444d41474943n;
const IHAVEOPT = 0x49484156454f5054n;
const OPTION_REPLY_MAGIC = 0x3e889045565a9n;
const REQUEST_MAGIC = 0x25609513;
const SIMPLE_REPLY_MAGIC = 0x67446698;
const FLAG_FIXED_NEWSTYLE = 1;
const FLAG_NO_ZEROES = 2;
const OPT_ABORT = 2;
const OPT_GO = 7;
const REP_ACK = 1;
const REP_INFO = 3;
const REP_ERR_UNSUP = 0x80000001;
const INFO_EXPORT = 0;
const TRANSMISSION_FLAGS = 1 | 2; // NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY
const CMD_READ = 0;
const CMD_DISC = 2;
const EIO = 5;
const EINVAL = 22;
/** qemu's client asks for at most 32 MiB at once; more is refused rather than allocated. */
const MAX_READ_BYTES = 32 * 2 ** 20;

/**
 * Read buffers used again once their reply is sent: a convert asks for the
 * same few sizes thousands of times, and a fresh buffer each time kept the
 * garbage collector busier than the copy itself.
 */
class BufferPool {
  private free: Buffer[] = [];

  /** A buffer of `length` bytes on a pooled one of at least that size (rounded to a power of two). */
  take(length: number): { data: Buffer; backing: Buffer } {
    const at = this.free.findIndex((b) => b.length >= length);
    const backing = at >= 0 ? this.free.splice(at, 1)[0]! : Buffer.allocUnsafeSlow(2 ** Math.ceil(Math.log2(Math.max(length, 4096))));
    return { data: backing.subarray(0, length), backing };
  }

  give(backing: Buffer): void {
    if (this.free.length < 32) this.free.push(backing);
  }
}

/** A socket's bytes, taken in the sizes the protocol's fields have. */
class Reader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private wake: (() => void) | undefined;
  private ended = false;

  constructor(socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
      this.wake?.();
    });
    socket.on('close', () => {
      this.ended = true;
      this.wake?.();
    });
  }

  async take(n: number): Promise<Buffer> {
    while (this.buffered < n) {
      if (this.ended) throw new Error('the client went away');
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
    const all = Buffer.concat(this.chunks);
    this.chunks = all.length > n ? [all.subarray(n)] : [];
    this.buffered -= n;
    return all.subarray(0, n);
  }
}

function optionReply(option: number, type: number, data = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(20);
  head.writeBigUInt64BE(OPTION_REPLY_MAGIC, 0);
  head.writeUInt32BE(option, 8);
  head.writeUInt32BE(type, 12);
  head.writeUInt32BE(data.length, 16);
  return Buffer.concat([head, data]);
}

function simpleReply(handle: Buffer, error: number): Buffer {
  const head = Buffer.alloc(16);
  head.writeUInt32BE(SIMPLE_REPLY_MAGIC, 0);
  head.writeUInt32BE(error, 4);
  handle.copy(head, 8);
  return head;
}

/** Options until NBD_OPT_GO; false when the client aborted. */
async function negotiate(socket: Socket, reader: Reader, size: number): Promise<boolean> {
  const greeting = Buffer.alloc(18);
  greeting.writeBigUInt64BE(NBDMAGIC, 0);
  greeting.writeBigUInt64BE(IHAVEOPT, 8);
  greeting.writeUInt16BE(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES, 16);
  socket.write(greeting);
  await reader.take(4); // the client's flags
  for (;;) {
    const head = await reader.take(16);
    if (head.readBigUInt64BE(0) !== IHAVEOPT) throw new Error('not an NBD option');
    const option = head.readUInt32BE(8);
    await reader.take(head.readUInt32BE(12)); // the export name and info requests: there is one export
    if (option === OPT_ABORT) {
      socket.end(optionReply(option, REP_ACK));
      return false;
    }
    if (option !== OPT_GO) {
      socket.write(optionReply(option, REP_ERR_UNSUP));
      continue;
    }
    const info = Buffer.alloc(12);
    info.writeUInt16BE(INFO_EXPORT, 0);
    info.writeBigUInt64BE(BigInt(size), 2);
    info.writeUInt16BE(TRANSMISSION_FLAGS, 10);
    socket.write(optionReply(option, REP_INFO, info));
    socket.write(optionReply(option, REP_ACK));
    return true;
  }
}

/**
 * Requests until NBD_CMD_DISC; reads are answered as they complete, in any
 * order, as the protocol allows: a reply's header and data go out in one
 * tick, so nothing comes between them.
 */
async function transmit(socket: Socket, reader: Reader, source: ExportSource): Promise<void> {
  const answer = (reply: Buffer) => void (!socket.destroyed && socket.write(reply));
  const buffers = new BufferPool();
  for (;;) {
    const req = await reader.take(28);
    if (req.readUInt32BE(0) !== REQUEST_MAGIC) throw new Error('not an NBD request');
    const type = req.readUInt16BE(6);
    const handle = Buffer.from(req.subarray(8, 16));
    const offset = Number(req.readBigUInt64BE(16));
    const length = req.readUInt32BE(24);
    if (type === CMD_DISC) return void socket.end();
    if (type !== CMD_READ || length > MAX_READ_BYTES || offset + length > source.size) {
      answer(simpleReply(handle, EINVAL));
      continue;
    }
    const { data, backing } = buffers.take(length);
    source.read(data, offset).then(
      () => {
        if (socket.destroyed) return;
        socket.write(simpleReply(handle, 0));
        socket.write(data, () => buffers.give(backing));
      },
      () => (buffers.give(backing), answer(simpleReply(handle, EIO))),
    );
  }
}

export interface NbdExport {
  /** What qemu-img opens: `nbd+unix:///?socket=…`. */
  readonly url: string;
  /** Stops serving and removes the socket's directory. */
  close(): Promise<void>;
}

/** Serves `source` read-only until closed. */
export async function exportOverNbd(source: ExportSource): Promise<NbdExport> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-nbd-'));
  const socketPath = join(dir, 'export.sock');
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    const reader = new Reader(socket);
    negotiate(socket, reader, source.size)
      .then((go) => (go ? transmit(socket, reader, source) : undefined))
      .catch(() => socket.destroy());
  });
  try {
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(socketPath, resolve));
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    url: `nbd+unix:///?socket=${socketPath}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
