import { PassThrough } from 'node:stream';
import t from 'tap';
import { readFirstFrame } from './rfb.js';

/** A scripted RFB 3.8 server: `frame` is what it answers the update request with. */
function server(frame: Buffer) {
  const toClient = new PassThrough();
  const fromClient = new PassThrough();
  const seen: Buffer[] = [];
  let step = 0;
  fromClient.on('data', (d: Buffer) => {
    seen.push(d);
    step++;
    if (step === 1) toClient.write(Buffer.of(1, 1)); // after the version: one security type, None
    if (step === 2) toClient.write(Buffer.alloc(4)); // after the type: SecurityResult OK
    if (step === 3) {
      // after ClientInit: 4×2 pixels, 32 bpp, name "vm"
      const init = Buffer.alloc(24);
      init.writeUInt16BE(4, 0);
      init.writeUInt16BE(2, 2);
      init[4] = 32;
      init.writeUInt32BE(2, 20);
      toClient.write(Buffer.concat([init, Buffer.from('vm')]));
    }
    if (step === 4) toClient.write(frame);
  });
  toClient.write('RFB 003.008\n');
  return { toClient, fromClient, seen };
}

const rect = (x: number, y: number, w: number, h: number, encoding = 0) => {
  const b = Buffer.alloc(12);
  b.writeUInt16BE(x, 0);
  b.writeUInt16BE(y, 2);
  b.writeUInt16BE(w, 4);
  b.writeUInt16BE(h, 6);
  b.writeInt32BE(encoding, 8);
  return b;
};

t.test('the handshake, then one whole-screen request, and its update read to the last pixel', async (t) => {
  const s = server(Buffer.concat([Buffer.of(0, 0, 0, 2), rect(0, 0, 4, 1), Buffer.alloc(16), rect(0, 1, 4, 1), Buffer.alloc(16)]));
  t.same(await readFirstFrame(s.toClient, s.fromClient), { width: 4, height: 2, bytes: 32 });
  t.same(
    s.seen.map((b) => b.toString('hex')),
    [Buffer.from('RFB 003.008\n').toString('hex'), '01', '01', '03000000000000040002'],
    'version 3.8, security None, a shared session, a non-incremental request for 4×2',
  );
});

t.test('an encoding other than raw fails the measurement', async (t) => {
  const s = server(Buffer.concat([Buffer.of(0, 0, 0, 1), rect(0, 0, 4, 2, 7)]));
  await t.rejects(readFirstFrame(s.toClient, s.fromClient), /unexpected encoding 7/);
});
