import t from 'tap';
import { probesOf, probeSpecOf } from './probe-spec.js';

t.test("the kubelet's defaults for unset timing fields", async (t) => {
  t.same(probeSpecOf({ tcpSocket: { port: 80 } }), {
    action: { kind: 'tcpSocket', port: 80 },
    initialDelayMs: 0,
    periodMs: 10_000,
    timeoutMs: 1_000,
    successThreshold: 1,
    failureThreshold: 3,
  });
  t.match(
    probeSpecOf({
      exec: { command: ['true'] },
      initialDelaySeconds: 5,
      periodSeconds: 2,
      timeoutSeconds: 3,
      successThreshold: 2,
      failureThreshold: 4,
    }),
    {
      initialDelayMs: 5000,
      periodMs: 2000,
      timeoutMs: 3000,
      successThreshold: 2,
      failureThreshold: 4,
    },
  );
});

t.test('each action; named ports from the container; what cannot run says why', async (t) => {
  const container = { name: 'vm', ports: [{ name: 'web', containerPort: 8080 }] };
  const cases: Array<[string, Parameters<typeof probeSpecOf>[0], unknown]> = [
    ['tcp by number', { tcpSocket: { port: 22 } }, { kind: 'tcpSocket', port: 22 }],
    ['tcp by name', { tcpSocket: { port: 'web' as unknown as number } }, { kind: 'tcpSocket', port: 8080 }],
    ['tcp by digits', { tcpSocket: { port: '8443' as unknown as number } }, { kind: 'tcpSocket', port: 8443 }],
    ['http defaults', { httpGet: { port: 80 } }, { kind: 'httpGet', port: 80, path: '/', scheme: 'HTTP', headers: [] }],
    [
      'https with headers',
      { httpGet: { port: 443, path: '/healthz', scheme: 'HTTPS', httpHeaders: [{ name: 'X-A', value: '1' }] } },
      { kind: 'httpGet', port: 443, path: '/healthz', scheme: 'HTTPS', headers: [{ name: 'X-A', value: '1' }] },
    ],
    ['exec', { exec: { command: ['/bin/true'] } }, { kind: 'exec', command: ['/bin/true'] }],
    ['guestAgentPing', { guestAgentPing: {} }, { kind: 'guestAgentPing' }],
    [
      'unknown name',
      { tcpSocket: { port: 'nope' as unknown as number } },
      { kind: 'unrunnable', message: 'port "nope" is not one of the container\'s named ports' },
    ],
    ['out of range', { tcpSocket: { port: 70000 } }, { kind: 'unrunnable', message: 'port 70000 is not in 1-65535' }],
    [
      'another host',
      { httpGet: { port: 80, host: '127.0.0.1' } },
      { kind: 'unrunnable', message: "a VM is probed at its own address only: remove the probe's host" },
    ],
    ['grpc', { grpc: { port: 9000 } }, { kind: 'unrunnable', message: 'gRPC probes are not supported for VMs' }],
  ];
  for (const [name, probe, want] of cases) t.same(probeSpecOf(probe, container).action, want, name);
});

t.test("a VMI's probe is its own; a plain pod's its container's", async (t) => {
  const container = { name: 'vm', readinessProbe: { tcpSocket: { port: 1 } } };
  t.same(probesOf(container), { readiness: probeSpecOf({ tcpSocket: { port: 1 } }) });
  t.same(
    probesOf(container, { readinessProbe: { guestAgentPing: {} } }),
    { readiness: probeSpecOf({ guestAgentPing: {} }) },
    "the VMI's, not the launcher pod's container",
  );
  t.same(probesOf(container, {}), {}, 'a VMI without one has none');
  t.same(
    probesOf({ name: 'vm', livenessProbe: { tcpSocket: { port: 2 } }, startupProbe: { exec: { command: ['true'] } } }),
    { liveness: probeSpecOf({ tcpSocket: { port: 2 } }), startup: probeSpecOf({ exec: { command: ['true'] } }) },
    "a plain pod's three kinds",
  );
  t.same(
    probesOf(container, { livenessProbe: { guestAgentPing: {} } }),
    { liveness: probeSpecOf({ guestAgentPing: {} }) },
    "a VMI's liveness probe",
  );
  t.same(probesOf(undefined), {});
});
