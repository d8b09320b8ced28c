// How a private libvirtd's end is put into words for the VM's status message.
import t from 'tap';
import { describeExit } from './libvirtd.js';

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
