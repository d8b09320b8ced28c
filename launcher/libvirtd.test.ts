// How a private libvirtd's end is put into words for the VM's status message.
import t from 'tap';
import { describeExit, libvirtError } from './libvirtd.js';

t.test('a libvirtd killed by a signal is said to be, whether the signal or its init shell reports it', async (t) => {
  t.same(
    [
      describeExit({ code: 137, signal: null }),
      describeExit({ code: null, signal: 'SIGTERM' }),
      describeExit({ code: 1, signal: null }),
      describeExit({ code: 0, signal: null }),
    ],
    ['was killed by SIGKILL', 'was killed by SIGTERM', 'exited with code 1', 'exited with code 0'],
  );
});

t.test("a libvirtd that failed to start is put in one line: the driver's failure, else the output's last line", async (t) => {
  // As Debian 12's libvirtd 9.0 wrote it when /var/cache/libvirt could not be made.
  const output = [
    '2026-11-27 07:47:12.780+0000: 77: info : libvirt version: 9.0.0, package: 9.0.0-4+deb12u2 (Debian)',
    '2026-11-27 07:47:12.780+0000: 77: error : virCommandWait:2725 : internal error: Child process (/usr/sbin/dmidecode -q -t 0,1,2,3,4,11,17) unexpected exit status 1: /dev/mem: No such file or directory',
    '',
    '2026-11-27 07:47:12.851+0000: 77: error : qemuStateInitialize:622 : Failed to create cache dir /var/cache/libvirt/qemu: Read-only file system',
    '2026-11-27 07:47:12.851+0000: 77: error : virStateInitialize:660 : Initialization of QEMU state driver failed: Failed to create cache dir /var/cache/libvirt/qemu: Read-only file system',
    '2026-11-27 07:47:12.851+0000: 77: error : daemonRunStateInit:616 : Driver state initialization failed',
  ].join('\n');
  t.same(
    [libvirtError(output), libvirtError('mount: /run/libvirt/usr: special device /usr does not exist.\n'), libvirtError('')],
    [
      'Initialization of QEMU state driver failed: Failed to create cache dir /var/cache/libvirt/qemu: Read-only file system',
      'mount: /run/libvirt/usr: special device /usr does not exist.',
      undefined,
    ],
  );
});
