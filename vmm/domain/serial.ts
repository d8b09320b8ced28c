// The serial console: QEMU binds a unix socket that the launcher connects to
// and fans out to the log file and attached streams. No <log> element: the
// launcher writes the console log, virtlogd is not involved.
import type { DomainBuilder } from './draft.js';

export const configureSerial: DomainBuilder = (_spec, _host, runtime, draft) => {
  const source = { $: { mode: 'bind' as const, path: runtime.consoleSocketPath } };
  draft.devices.serial.push({ $: { type: 'unix' }, source, target: { $: { port: 0 } } });
  // <console> on serial port 0 makes the same port the guest's primary console.
  draft.devices.console.push({ $: { type: 'unix' }, source, target: { $: { type: 'serial', port: 0 } } });
};
