import t from 'tap';
import { pino } from 'pino';
import type { V1Pod } from '@kubernetes/client-node';
import { fakeClock } from '../../../test/helpers/fake-clock.js';
import { probeSpecOf, type ProbeSpec, type VmProbes } from './probe-spec.js';
import { Prober, type ProbedVm } from './prober.js';

const flush = () => new Promise((r) => setImmediate(r));
const pod: V1Pod = { metadata: { name: 'p', namespace: 'ns', uid: 'u1' } };

function env(outcomes: boolean[]) {
  const clock = fakeClock();
  const seen = { readinessChanges: 0, events: [] as string[], runs: 0, failures: [] as string[] };
  const prober = new Prober({
    clock,
    events: { record: (_p, type, reason, message) => seen.events.push(`${type} ${reason} ${message}`) },
    onReadinessChange: () => seen.readinessChanges++,
    onFailure: (_vm, kind, message) => seen.failures.push(`${kind}: ${message}`),
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

const vm = (readiness: ProbeSpec | undefined, run = 'run-1', more: VmProbes = {}): ProbedVm => ({
  uid: 'u1',
  key: 'ns/p',
  pod,
  run,
  podIP: '10.0.0.2',
  guest: { exec: async () => ({ exitCode: 0, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) }), ping: async () => ({}) },
  probes: { ...(readiness ? { readiness } : {}), ...more },
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

t.test('liveness: alive until failureThreshold failures in a row, then the VM is handed over to be killed, once', async (t) => {
  const { prober, seen, step, clock } = env([false, true, false, false, false, false]);
  prober.follow(vm(undefined, 'run-1', { liveness: probeSpecOf({ tcpSocket: { port: 22 }, periodSeconds: 1, failureThreshold: 3 }) }));
  t.equal(prober.ready('u1'), undefined, 'a liveness probe says nothing of readiness');
  await step(0);
  await step(1_000);
  await step(1_000);
  await step(1_000);
  t.same(seen.failures, [], 'a pass between failures starts the count again');
  await step(1_000);
  t.same(seen.failures, ['liveness: Liveness probe failed: dial tcp 10.0.0.2:80: ECONNREFUSED']);
  t.equal(seen.events.filter((e) => e.startsWith('Warning Unhealthy Liveness probe failed')).length, 4);
  t.equal(clock.pending(), 0, 'the run is over: no probe runs until the next run');
});

t.test('startup: readiness and liveness wait until it passes; failing it kills the VM', async (t) => {
  const passes = env([false, true, true]);
  const startup = probeSpecOf({ exec: { command: ['/bin/true'] }, periodSeconds: 1, failureThreshold: 2 });
  const liveness = probeSpecOf({ exec: { command: ['/bin/true'] }, periodSeconds: 1 });
  passes.prober.follow(vm(probeSpecOf({ exec: { command: ['/bin/true'] }, periodSeconds: 1 }), 'run-1', { startup, liveness }));
  await passes.step(0);
  t.equal(passes.seen.runs, 1, 'only the startup probe ran');
  t.equal(passes.prober.ready('u1'), false);
  await passes.step(1_000);
  t.equal(passes.seen.readinessChanges, 1, 'started: readiness is written again');
  await passes.step(1_000);
  t.equal(passes.prober.ready('u1'), true, 'readiness runs once started');
  t.same(passes.seen.failures, []);

  const fails = env([false, false]);
  fails.prober.follow(vm(undefined, 'run-1', { startup, liveness }));
  await fails.step(0);
  t.same(fails.seen.failures, [], 'one failure is under the threshold of 2');
  await fails.step(1_000);
  t.same(fails.seen.failures, ['startup: Startup probe failed: dial tcp 10.0.0.2:80: ECONNREFUSED']);
  t.equal(fails.seen.runs, 2, 'liveness never ran');
  t.equal(fails.clock.pending(), 0);
});
