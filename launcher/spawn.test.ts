// What the agent says of a launcher that died before it served: one line, from its log.
import t from 'tap';
import { startFailureCause } from './spawn.js';

t.test("a launcher's start-up failure is the first line of the last error it logged", async (t) => {
  const log = [
    JSON.stringify({ level: 30, msg: 'launcher starting' }),
    JSON.stringify({ level: 40, msg: 'a warning' }),
    JSON.stringify({
      level: 60,
      err: {
        type: 'LibvirtdStartError',
        message: "the VM's libvirt daemon failed to start: Failed to create cache dir",
        stack: 'Error: …\n    at x',
        output: '…',
      },
      msg: 'launcher failed to start',
    }),
    'node:internal/process/…: some raw output after it',
  ].join('\n');
  t.same(
    [
      startFailureCause(log),
      startFailureCause(JSON.stringify({ level: 50, msg: 'could not bind\nits socket' })),
      startFailureCause('not json\n' + JSON.stringify({ level: 30, msg: 'info only' })),
      // Thrown before the logger ran: Node's own report.
      startFailureCause(
        '/x/launcher/args.ts:99\n      throw new Error(`…`);\n            ^\n\n\nError: unix socket path /p is longer than 107 bytes; use a shorter --run-dir\n    at parseLauncherArgs (/x/launcher/args.ts:99:13)\n\nNode.js v20.20.2\n',
      ),
    ],
    [
      "the VM's libvirt daemon failed to start: Failed to create cache dir",
      'could not bind',
      undefined,
      'unix socket path /p is longer than 107 bytes; use a shorter --run-dir',
    ],
  );
});
