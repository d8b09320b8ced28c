import t from 'tap';
import { pino } from 'pino';
import type { V1Pod } from '@kubernetes/client-node';
import { fakeClock } from '../../../test/helpers/fake-clock.js';
import { probeSpecOf } from './probe-spec.js';
import { Prober, type ProbedVm } from './prober.js';

const flush = () => new Promise((r) => setImmediate(r));
const pod: V1Pod = { metadata: { name: 'p', namespace: 'ns', uid: 'u1' } };

function env(outcomes: boolean[]) {
  const clock = fakeClock();
  const seen = { readinessChanges: 0, events: [] as string[], runs: 0 };
  const prober = new Prober({
    clock,
    events: { record: (_p, type, reason, message) => seen.events.push(`${type} ${reason} ${message}`) },
    onReadinessChange: () => seen.readinessChanges++,
    log: pino({ level: 'silent' }),
    run: async () => {
      const ok = outcomes[seen.runs++] ?? true;
      return ok ? { ok } : { ok, message: 'dial tcp 10.0.0.2:80: ECONNREFUSED' };
    },
  });
  const step = async (ms: number) => {
    clock.advance(ms);
    await flush();
  };
  return { clock, prober, seen, step };
}

const vm = (readiness: ProbedVm['readiness'], run = 'run-1'): ProbedVm => ({
  uid: 'u1',
  key: 'ns/p',
  pod,
  run,
  podIP: '10.0.0.2',
  guest: { exec: async () => ({ exitCode: 0, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) }), ping: async () => ({}) },
  readiness,
});

t.test('readiness: not Ready until the probe passes after its initial delay; failures past the threshold take it back', async (t) => {
  const { prober, seen, step } = env([false, true, false, false, false]);
  t.equal(prober.ready('u1'), undefined, 'no probe: the caller decides');
  prober.follow(vm(probeSpecOf({ tcpSocket: { port: 80 }, initialDelaySeconds: 5, periodSeconds: 2 })));
  t.equal(prober.ready('u1'), false, 'not Ready before any run');
  await step(4_999);
  t.equal(seen.runs, 0, 'nothing runs before the initial delay');
  await step(1);
  t.equal(prober.ready('u1'), false, 'first run failed');
  t.same(seen.events, ['Warning Unhealthy Readiness probe failed: dial tcp 10.0.0.2:80: ECONNREFUSED']);
  await step(2_000);
  t.equal(prober.ready('u1'), true, 'second run passed');
  t.equal(seen.readinessChanges, 1, 'the status is written again');
  await step(2_000);
  await step(2_000);
  t.equal(prober.ready('u1'), true, 'two failures are under the threshold of 3');
  await step(2_000);
  t.equal(prober.ready('u1'), false, 'the third failure counts');
  t.equal(seen.readinessChanges, 2);
});

t.test('follow is idempotent; forget stops the workers', async (t) => {
  const { prober, seen, step, clock } = env([]);
  const probes = probeSpecOf({ exec: { command: ['/bin/true'] }, periodSeconds: 1 });
  prober.follow(vm(probes));
  prober.follow(vm(probes));
  await step(0);
  t.equal(seen.runs, 1, 'one worker, not two');
  prober.follow(vm(probes, 'run-2'));
  t.equal(prober.ready('u1'), false, 'a new run is not Ready until its probe passes');
  t.equal(seen.readinessChanges, 2, 'which is written again');
  prober.forget('u1');
  t.equal(clock.pending(), 0, 'no timer left');
  t.equal(prober.ready('u1'), undefined);
});
