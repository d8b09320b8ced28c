import t from 'tap';
import { configureGraphics } from './graphics.js';
import { applyBuilder, testRuntime, testSpec, TCG_HOST } from '../testing/specs.js';

t.test('a VNC display listens on the runtime socket, with a VGA card', async (t) => {
  const { graphics, video } = applyBuilder(
    configureGraphics,
    testSpec({ vnc: true }),
    TCG_HOST,
    testRuntime({ vncSocketPath: '/r/vnc.sock' }),
  ).devices;
  t.same(
    { graphics, video },
    {
      graphics: [{ $: { type: 'vnc' }, listen: { $: { type: 'socket', socket: '/r/vnc.sock' } } }],
      video: [{ model: { $: { type: 'vga', vram: 16384, heads: 1 } } }],
    },
  );
});

t.test('no display, and no card, unless the spec asks for one', async (t) => {
  const { graphics, video } = applyBuilder(configureGraphics, testSpec(), TCG_HOST, testRuntime({ vncSocketPath: '/r/vnc.sock' })).devices;
  t.same({ graphics, video }, { graphics: [], video: [] });
});

t.test('a display without a socket path is a launcher bug', async (t) => {
  t.throws(() => applyBuilder(configureGraphics, testSpec({ vnc: true }), TCG_HOST, testRuntime({ vncSocketPath: undefined })), {
    kind: 'RuntimeMismatchError',
    message: /VNC display/,
  });
});
