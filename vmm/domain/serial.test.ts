import t from 'tap';
import { configureSerial } from './serial.js';
import { applyBuilder, testRuntime, testSpec, TCG_HOST } from '../testing/specs.js';

t.test('serial port 0 and the console share one bound unix socket, without a log file', async (t) => {
  const { serial, console } = applyBuilder(
    configureSerial,
    testSpec(),
    TCG_HOST,
    testRuntime({ consoleSocketPath: '/r/console.sock' }),
  ).devices;
  const source = { $: { mode: 'bind', path: '/r/console.sock' } };
  t.same(
    { serial, console },
    {
      serial: [{ $: { type: 'unix' }, source, target: { $: { port: 0 } } }],
      console: [{ $: { type: 'unix' }, source, target: { $: { type: 'serial', port: 0 } } }],
    },
  );
});
