// The least of an RFB (VNC) client the streams benchmark needs to time a first
// frame: the 3.8 handshake with security type None, ServerInit, one
// non-incremental FramebufferUpdateRequest for the whole screen, and that
// update read to its last byte (raw encoding, which every server must
// offer). Anything else the server sends first fails the measurement.
import type { Readable, Writable } from 'node:stream';

/** Reads exactly n bytes from a stream in paused mode. */
class ByteReader {
  private buffered = Buffer.alloc(0);
  private wake: (() => void) | undefined;
  private ended = false;

  constructor(stream: Readable) {
    stream.on('data', (d: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, d]);
      this.wake?.();
    });
    stream.on('end', () => {
      this.ended = true;
      this.wake?.();
    });
  }

  async read(n: number): Promise<Buffer> {
    while (this.buffered.length < n) {
      if (this.ended) throw new Error(`the VNC server closed the connection (wanted ${n} bytes, had ${this.buffered.length})`);
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
    const out = this.buffered.subarray(0, n);
    this.buffered = this.buffered.subarray(n);
    return out;
  }
}

export interface FirstFrame {
  width: number;
  height: number;
  /** The update's bytes of pixel data. */
  bytes: number;
}

/** Runs the handshake on `input`/`output` and reads the first whole framebuffer. */
export async function readFirstFrame(input: Readable, output: Writable): Promise<FirstFrame> {
  const r = new ByteReader(input);
  const version = (await r.read(12)).toString('latin1');
  if (!/^RFB 003\.00[78]\n$/.test(version)) throw new Error(`unexpected RFB version ${JSON.stringify(version)}`);
  output.write('RFB 003.008\n');
  const count = (await r.read(1))[0]!;
  if (count === 0) throw new Error(`the server refused: ${(await r.read((await r.read(4)).readUInt32BE(0))).toString()}`);
  const types = [...(await r.read(count))];
  if (!types.includes(1)) throw new Error(`no security type None among ${JSON.stringify(types)}`);
  output.write(Buffer.of(1));
  if ((await r.read(4)).readUInt32BE(0) !== 0) throw new Error('security handshake failed');
  output.write(Buffer.of(1)); // ClientInit: shared
  const init = await r.read(24);
  const width = init.readUInt16BE(0);
  const height = init.readUInt16BE(2);
  const bytesPerPixel = init[4]! / 8;
  await r.read(init.readUInt32BE(20)); // the desktop's name
  const request = Buffer.alloc(10);
  request.writeUInt8(3, 0); // FramebufferUpdateRequest
  request.writeUInt8(0, 1); // not incremental
  request.writeUInt16BE(width, 6);
  request.writeUInt16BE(height, 8);
  output.write(request);
  const header = await r.read(4);
  if (header[0] !== 0) throw new Error(`expected a FramebufferUpdate, got message type ${header[0]}`);
  let bytes = 0;
  for (let i = header.readUInt16BE(2); i > 0; i--) {
    const rect = await r.read(12);
    const encoding = rect.readInt32BE(8);
    if (encoding !== 0) throw new Error(`unexpected encoding ${encoding} (only raw was offered)`);
    const size = rect.readUInt16BE(4) * rect.readUInt16BE(6) * bytesPerPixel;
    await r.read(size);
    bytes += size;
  }
  return { width, height, bytes };
}
