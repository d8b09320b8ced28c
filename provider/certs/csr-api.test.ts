// Approving a CSR that another approver decides between our read and our
// write (kube-controller-manager approves an admin's node client CSR at once):
// the conflict is read again, not thrown.
import t from 'tap';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { approveCertificateSigningRequest } from './csr-api.js';

const why = { reason: 'Test', message: 'approved by the test' };
const pending = (): V1CertificateSigningRequest => ({ metadata: { name: 'c' }, spec: { request: '', signerName: 's' }, status: {} });
const approved = (): V1CertificateSigningRequest => ({
  ...pending(),
  status: { conditions: [{ type: 'Approved', status: 'True', reason: 'AutoApproved', message: 'by kcm' }] },
});

function fakeClients(reads: V1CertificateSigningRequest[], writes: Array<'conflict' | 'ok'>) {
  const written: V1CertificateSigningRequest[] = [];
  const certificates = {
    readCertificateSigningRequest: () => Promise.resolve(reads.shift()!),
    replaceCertificateSigningRequestApproval: ({ body }: { body: V1CertificateSigningRequest }) => {
      if (writes.shift() === 'conflict') return Promise.reject(Object.assign(new Error('conflict'), { code: 409 }));
      written.push(body);
      return Promise.resolve(body);
    },
  };
  return { clients: { certificates } as unknown as KubeClients, written };
}

t.test('a conflict because another approver was first: read again, leave it decided', async (t) => {
  const { clients, written } = fakeClients([pending(), approved()], ['conflict']);
  t.equal(await approveCertificateSigningRequest(clients, 'c', why), false, 'not approved by us');
  t.same(written, [], 'nothing written over the other decision');
});

t.test('a conflict with no decision yet: approved on the next read', async (t) => {
  const { clients, written } = fakeClients([pending(), pending()], ['conflict', 'ok']);
  t.equal(await approveCertificateSigningRequest(clients, 'c', why), true);
  t.same(
    written.map((c) => c.status?.conditions?.map((x) => x.reason)),
    [['Test']],
    'one Approved condition, ours',
  );
});

t.test('other failures are thrown', async (t) => {
  const certificates = {
    readCertificateSigningRequest: () => Promise.resolve(pending()),
    replaceCertificateSigningRequestApproval: () => Promise.reject(Object.assign(new Error('forbidden'), { code: 403 })),
  };
  await t.rejects(approveCertificateSigningRequest({ certificates } as unknown as KubeClients, 'c', why), /forbidden/);
});
