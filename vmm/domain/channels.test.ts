import t from 'tap';
import { configureChannels } from './channels.js';
import { applyBuilder, testRuntime, testSpec, TCG_HOST } from '../testing/specs.js';

t.test('a guest agent channel on a bound unix socket when the spec asks for one', async (t) => {
  const draft = applyBuilder(
    configureChannels,
    testSpec({ guestAgent: true }),
    TCG_HOST,
    testRuntime({ guestAgentSocketPath: '/r/qga.sock' }),
  );
  t.same(draft.devices.channel, [
    {
      $: { type: 'unix' },
      source: { $: { mode: 'bind', path: '/r/qga.sock' } },
      target: { $: { type: 'virtio', name: 'org.qemu.guest_agent.0' } },
    },
  ]);
});

t.test('no channel without a guest agent', async (t) => {
  t.same(applyBuilder(configureChannels, testSpec({ guestAgent: false })).devices.channel, []);
});

t.test('a guest agent without a socket path is a launcher bug', async (t) => {
  const runtime = testRuntime({ guestAgentSocketPath: undefined });
  t.throws(() => applyBuilder(configureChannels, testSpec({ guestAgent: true }), TCG_HOST, runtime), {
    kind: 'RuntimeMismatchError',
    message: /guest agent/,
  });
});
