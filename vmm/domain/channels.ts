// The QEMU guest agent channel. The name is what qemu-ga looks for inside the
// guest (it shows up as a virtio port); the launcher connects to the socket.
import { RuntimeMismatchError } from '../errors.js';
import type { DomainBuilder } from './draft.js';

export const GUEST_AGENT_CHANNEL = 'org.qemu.guest_agent.0';

export const configureChannels: DomainBuilder = (spec, _host, runtime, draft) => {
  if (!spec.guestAgent) return;
  if (!runtime.guestAgentSocketPath) throw new RuntimeMismatchError('spec asks for a guest agent but the runtime has no socket path');
  draft.devices.channel.push({
    $: { type: 'unix' },
    source: { $: { mode: 'bind', path: runtime.guestAgentSocketPath } },
    target: { $: { type: 'virtio', name: GUEST_AGENT_CHANNEL } },
  });
};
