import t from 'tap';
import { guestUp, type GuestFacts } from './guest-up.js';

const STARTED = 1_700_000_000_000;
const run: GuestFacts = {
  startedAtUnixMs: STARTED,
  consoleOutputAtUnixMs: 0,
  firmwareOnConsole: false,
  guestAgentConnected: false,
  guestAgentConnectedAtUnixMs: 0,
};

const FIRMWARE: Record<string, Partial<GuestFacts>> = {
  bios: { firmwareOnConsole: false },
  'bios, useSerial': { firmwareOnConsole: true },
  efi: { firmwareOnConsole: true },
};

/** Each signal, and what it says on a firmware that is silent on serial (bios) and one that writes there (the others). */
const SIGNALS: Array<[string, Partial<GuestFacts>, number | undefined, { silent: boolean; speaking: boolean }]> = [
  ['nothing yet', {}, undefined, { silent: false, speaking: false }],
  ['console output', { consoleOutputAtUnixMs: STARTED + 900 }, undefined, { silent: true, speaking: false }],
  [
    'the guest agent connected',
    { guestAgentConnected: true, guestAgentConnectedAtUnixMs: STARTED + 9000 },
    undefined,
    { silent: true, speaking: true },
  ],
  ['the guest agent connected, then went', { guestAgentConnectedAtUnixMs: STARTED + 9000 }, undefined, { silent: true, speaking: true }],
  ['DHCP served the guest in this run', {}, STARTED + 8000, { silent: true, speaking: true }],
  ['DHCP served the guest of an earlier run', {}, STARTED - 60_000, { silent: false, speaking: false }],
  ['console output, DHCP of an earlier run', { consoleOutputAtUnixMs: STARTED + 900 }, STARTED - 1, { silent: true, speaking: false }],
  [
    'arrived by live migration',
    { migration: { uid: 'm', role: 'Target', phase: 'Resumed', reason: '', message: '' } },
    undefined,
    { silent: true, speaking: true },
  ],
  [
    'a migration received, not yet resumed',
    { migration: { uid: 'm', role: 'Target', phase: 'ReceivedPaused', reason: '', message: '' } },
    undefined,
    { silent: false, speaking: false },
  ],
];

t.test('the guest is up by its first signal of this run; console output counts only where the firmware is silent on serial', async (t) => {
  for (const [firmware, fw] of Object.entries(FIRMWARE)) {
    for (const [signal, facts, dhcpAt, want] of SIGNALS) {
      const expected = fw.firmwareOnConsole ? want.speaking : want.silent;
      t.equal(guestUp({ ...run, ...fw, ...facts }, dhcpAt), expected, `${firmware}: ${signal} → ${expected ? 'up' : 'not up'}`);
    }
  }
});

t.test('a run not started yet takes no DHCP answer for its own', async (t) => {
  t.equal(guestUp({ ...run, startedAtUnixMs: 0 }, STARTED), false);
});
