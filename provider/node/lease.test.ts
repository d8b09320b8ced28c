// The node lease's heartbeat against a fake API: a renewal that gets no answer
// within one renew interval closes every connection to the API server, as the
// kubelet does when its heartbeat fails; one the server refuses does not.
import t from 'tap';
import { ApiException, type V1Lease } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { pino } from 'pino';
import { LeaseController } from './lease.js';

function fakeClients(answer: () => Promise<V1Lease>): { clients: KubeClients; closed: () => number } {
  let closed = 0;
  const coordination = { readNamespacedLease: answer, replaceNamespacedLease: answer, createNamespacedLease: answer };
  const clients = { coordination, closeConnections: () => void closed++ } as unknown as KubeClients;
  return { clients, closed: () => closed };
}

async function runFor(clients: KubeClients, ms: number): Promise<LeaseController> {
  const lease = new LeaseController(
    clients,
    { nodeName: 'n', nodeUID: 'u', leaseDurationS: 40, renewIntervalMs: 50, healthy: async () => true },
    pino({ level: 'silent' }),
  );
  lease.start();
  await new Promise((resolve) => setTimeout(resolve, ms));
  lease.stop();
  return lease;
}

t.test('a renewal with no answer closes the connections; one refused by the server does not', async (t) => {
  const silent = fakeClients(() => new Promise<V1Lease>(() => {}));
  const silentLease = await runFor(silent.clients, 180);
  const refused = fakeClients(() => Promise.reject(new ApiException(500, 'internal error', '{}', {})));
  const refusedLease = await runFor(refused.clients, 180);
  const answered = fakeClients(async () => ({ metadata: { name: 'n' }, spec: {} }));
  const answeredLease = await runFor(answered.clients, 80);
  t.match(
    {
      silent: { closed: silent.closed() >= 2, renewed: silentLease.lastRenewal !== undefined },
      refused: { closed: refused.closed(), renewed: refusedLease.lastRenewal !== undefined },
      answered: { closed: answered.closed(), renewed: answeredLease.lastRenewal !== undefined },
    },
    {
      silent: { closed: true, renewed: false },
      refused: { closed: 0, renewed: false },
      answered: { closed: 0, renewed: true },
    },
  );
});
