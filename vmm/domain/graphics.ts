// The VNC display: a VGA card, and QEMU's VNC server on a unix socket the
// launcher places in its private directory (no TCP port on the host). The
// node agent relays it to clients through its authorized kubelet API. The
// card is KubeVirt's default: VGA, one head, 16 MiB of video memory.
import { RuntimeMismatchError } from '../errors.js';
import type { DomainBuilder } from './draft.js';

export const VIDEO_VRAM_KIB = 16384;

export const configureGraphics: DomainBuilder = (spec, _host, runtime, draft) => {
  if (!spec.vnc) return;
  if (!runtime.vncSocketPath) throw new RuntimeMismatchError('spec asks for a VNC display but the runtime has no socket path');
  draft.devices.graphics.push({ $: { type: 'vnc' }, listen: { $: { type: 'socket', socket: runtime.vncSocketPath } } });
  draft.devices.video.push({ model: { $: { type: 'vga', vram: VIDEO_VRAM_KIB, heads: 1 } } });
};
