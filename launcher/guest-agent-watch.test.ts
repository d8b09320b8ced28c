// node:test's mock timers: the launcher's retries use plain setTimeout (it has no injected clock).
import { mock } from 'node:test';
import { pino } from 'pino';
import t from 'tap';
import { GuestAgentWatch } from './guest-agent-watch.js';
import type { VmState } from './state.js';

t.test('a connected agent that answers guest-get-osinfo only late is asked until it does, at most 30 s apart', async (t) => {
  mock.timers.enable({ apis: ['setTimeout'] });
  t.teardown(() => mock.timers.reset());
  let failuresLeft = 9;
  const asked: number[] = [];
  let published: Pick<Partial<VmState>, 'guestAgentConnected' | 'guestAgentConnectedAtUnixMs' | 'guestOsInfo'> = {};
  let now = 0;
  const watch = new GuestAgentWatch({
    driver: {
      agentConnected: () => Promise.resolve(true),
      agentCommand: () => {
        asked.push(now);
        if (failuresLeft-- > 0) return Promise.reject(new Error('Guest agent is not responding'));
        return Promise.resolve({ 'kernel-release': '6.1.0-28-amd64', machine: 'x86_64', name: '' });
      },
    },
    domainUuid: () => 'uuid',
    active: () => true,
    current: () => ({ guestAgentConnectedAtUnixMs: 0, ...published }),
    publish: (next) => (published = { ...published, ...next }),
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => watch.stop());
  await watch.refresh();
  for (let i = 0; i < 12 && !published.guestOsInfo; i++) {
    now += 30_000;
    mock.timers.tick(30_000);
    // Let the retried refresh run its awaits.
    for (let j = 0; j < 10; j++) await Promise.resolve();
  }
  t.same(published, {
    guestAgentConnected: true,
    guestAgentConnectedAtUnixMs: published.guestAgentConnectedAtUnixMs,
    guestOsInfo: { kernelRelease: '6.1.0-28-amd64', machine: 'x86_64' },
  });
  t.equal(asked.length, 10, 'nine failures, then the answer: never given up');
  t.same(
    asked.filter((at, i) => i > 0 && at - asked[i - 1]! > 30_000),
    [],
    'no wait longer than 30 s (time moves in 30 s steps here)',
  );
});

t.test("the run's first connection of the agent is kept through a disconnect and a reconnection", async (t) => {
  let connected = true;
  let published: Pick<Partial<VmState>, 'guestAgentConnected' | 'guestAgentConnectedAtUnixMs' | 'guestOsInfo'> = {
    guestAgentConnectedAtUnixMs: 0,
  };
  const watch = new GuestAgentWatch({
    driver: { agentConnected: () => Promise.resolve(connected), agentCommand: () => Promise.resolve({ name: 'Debian' }) },
    domainUuid: () => 'uuid',
    active: () => true,
    current: () => ({ guestAgentConnectedAtUnixMs: 0, ...published }),
    publish: (next) => (published = { ...published, ...next }),
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => watch.stop());
  const before = Date.now();
  await watch.refresh();
  const first = published.guestAgentConnectedAtUnixMs ?? 0;
  t.ok(first >= before && first <= Date.now(), 'the first connection is stamped when it is seen');
  connected = false;
  await watch.refresh();
  await new Promise((r) => setTimeout(r, 5));
  connected = true;
  await watch.refresh();
  t.same(
    { connected: published.guestAgentConnected, at: published.guestAgentConnectedAtUnixMs },
    { connected: true, at: first },
    'connected again, the first connection time unchanged',
  );
});
