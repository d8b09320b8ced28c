// The test guest's UDP echo: Debian's netcat-traditional on port 7 (echo),
// so that UDP port-forward (`virtctl port-forward … udp/…`) has a real guest
// server to reach; busybox's nc has no UDP. Each datagram comes back as it
// was. nc serves the first peer it hears from until it dies, then init starts
// another: one client at a time, as the tests need.
export const NETCAT = '/bin/nc.traditional';
export const UDP_ECHO_PORT = 7;

/** The busybox inittab line that keeps the echo running. */
export const UDP_ECHO_INITTAB = '::respawn:/bin/vkvm-udp-echo';

/** The echo's start script, by guest path. */
export function udpEchoFiles(): Map<string, string> {
  return new Map([
    [
      '/bin/vkvm-udp-echo',
      `#!/bin/sh
# -n: no name lookups; -e: cat reads and writes the socket, a datagram per read.
exec /bin/nc.traditional -n -u -l -p ${UDP_ECHO_PORT} -e /bin/cat >/dev/null 2>&1
`,
    ],
  ]);
}
