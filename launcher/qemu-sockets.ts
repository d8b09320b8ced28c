// Where a launcher's QEMU listens: a directory of the VM's run directory that
// only QEMU's user may enter (mode 0700), holding the serial console, guest
// agent and VNC sockets. The node agent reaches the VNC socket as root from
// the host, as KubeVirt's virt-handler reaches virt-launcher's private dir.
// QEMU's uid owns that directory, so root reaches a socket there only through
// connectNoFollow: never along a link QEMU planted, never to a socket of
// another owner.
import path from 'node:path';
import type { Socket } from 'node:net';
import { connectNoFollow } from '../vmm/no-follow.js';

export const qemuSocketDir = (runDir: string): string => path.join(runDir, 'qemu');

export const VNC_SOCKET_NAME = 'vnc.sock';

/** The VNC socket of the VM whose launcher runs in `runDir`, when its spec asks for a display. */
export const vncSocketPath = (runDir: string): string => path.join(qemuSocketDir(runDir), VNC_SOCKET_NAME);

/** Connects to that VNC socket; QEMU itself binds it, so it must be owned by QEMU's uid. ENOENT: the VM has no display. */
export const connectVncSocket = (runDir: string, qemuUid: number): Promise<Socket> =>
  connectNoFollow(vncSocketPath(runDir), { owners: [qemuUid], allowHalfOpen: true });
