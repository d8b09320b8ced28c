// The test guest's SSH server: Debian's dropbear (package dropbear-bin) on
// port 22, so that `virtctl ssh` and port-forward have a real server to reach.
// Keys only: root logs in with a key in /root/.ssh/authorized_keys, which the
// test set-up (or the guest's cloud-init) writes. Host keys are made on the
// first connection (-R), so every boot has its own.
export const DROPBEAR = '/usr/sbin/dropbear';
export const SSH_PORT = 22;

/** The busybox inittab line that keeps the server running. */
export const SSH_SERVER_INITTAB = '::respawn:/bin/vkvm-sshd';

/** The server's start script, by guest path; its log stays off the serial console. */
export function sshServerFiles(): Map<string, string> {
  return new Map([
    [
      '/bin/vkvm-sshd',
      `#!/bin/sh
mkdir -p /etc/dropbear
exec /bin/dropbear -F -E -R -s -p ${SSH_PORT} >>/run/dropbear.log 2>&1
`,
    ],
  ]);
}
