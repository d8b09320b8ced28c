import t from 'tap';
import { webcrypto } from 'node:crypto';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// @peculiar/x509 needs the polyfill loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { parse } from 'yaml';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { EC, fakeCertificatesApi, issue, newCa, type TestCa } from '../../test/helpers/fake-ca.js';
import { nodeStoragePaths } from './node-storage-spec.js';
import { ensureProvisionerCredentials } from './provisioner-credentials.js';

const DAY_MS = 86400_000;

/** The fake certificates API, plus approvals: what each approved CSR was approved with. */
function fakeAdmin(ca: TestCa) {
  const { clients, created } = fakeCertificatesApi(ca);
  const approvals: Array<{ name: string; reason?: string }> = [];
  const admin = {
    ...clients,
    certificates: {
      ...clients.certificates,
      replaceCertificateSigningRequestApproval: async ({ name, body }: { name: string; body: V1CertificateSigningRequest }) => {
        approvals.push({ name, reason: body.status?.conditions?.find((c) => c.type === 'Approved')?.reason });
        return body;
      },
    },
  } as unknown as KubeClients;
  return { admin, created, approvals };
}

const modeOf = async (path: string) => ((await stat(path)).mode & 0o777).toString(8);

t.test("the provisioner's identity is its node's, approved by the caller, its files private", async (t) => {
  const ca = await newCa();
  const { admin, created, approvals } = fakeAdmin(ca);
  const stateDir = join(t.testdir(), 'nodes', '2');
  const paths = nodeStoragePaths({ stateDir, runDir: '/run/vkvm/nodes/2' });
  await ensureProvisionerCredentials(admin, { nodeName: 'box-2', server: 'https://10.0.0.1:6443', caPem: ca.pem, paths });

  const request = new x509.Pkcs10CertificateRequest(Buffer.from(created[0]!.spec.request, 'base64').toString('utf8'));
  t.match(
    { signer: created[0]!.spec.signerName, usages: created[0]!.spec.usages, subject: request.subject, approvals },
    {
      signer: 'kubernetes.io/kube-apiserver-client',
      usages: ['digital signature', 'client auth'],
      subject: 'CN=vkvm:csi-provisioner:box-2, O=vkvm:csi-provisioners',
      approvals: [{ name: created[0]!.metadata!.name, reason: 'VkvmCsiProvisioner' }],
    },
    'one CSR for the node’s provisioner, for client auth, approved',
  );
  const kubeconfig = parse(await readFile(paths.kubeconfig, 'utf8')) as Record<string, unknown>;
  t.match(
    kubeconfig,
    {
      clusters: [{ cluster: { server: 'https://10.0.0.1:6443', 'certificate-authority-data': Buffer.from(ca.pem).toString('base64') } }],
      users: [{ name: 'vkvm:csi-provisioner:box-2', user: { 'client-certificate': paths.pem, 'client-key': paths.pem } }],
    },
    'the kubeconfig names the server, the cluster CA and the PEM',
  );
  t.match(
    await readFile(paths.pem, 'utf8'),
    /-----BEGIN CERTIFICATE-----[^]*-----BEGIN PRIVATE KEY-----/,
    'the PEM holds the certificate and its key',
  );
  t.same(
    [await modeOf(stateDir), await modeOf(paths.dir), await modeOf(paths.pem), await modeOf(paths.kubeconfig)],
    ['711', '700', '600', '600'],
    'the node’s state dir stays searchable (QEMU), the credentials are root’s only',
  );

  await ensureProvisionerCredentials(admin, { nodeName: 'box-2', server: 'https://10.0.0.9:6443', caPem: ca.pem, paths });
  t.equal(created.length, 1, 'a certificate valid for a year is kept');
  t.match(
    parse(await readFile(paths.kubeconfig, 'utf8')),
    { clusters: [{ cluster: { server: 'https://10.0.0.9:6443' } }] },
    'the kubeconfig names the server afresh',
  );
});

t.test('a certificate of another CA, or one that ends within a month, is replaced', async (t) => {
  const ca = await newCa();
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const publicKey = keys.publicKey as unknown as x509.PublicKeyType;
  const cn = 'CN=vkvm:csi-provisioner:box';
  for (const [what, cert] of [
    ['of another CA', await issue(await newCa(), publicKey, cn, new Date(), new Date(Date.now() + 365 * DAY_MS))],
    ['ending in 10 days', await issue(ca, publicKey, cn, new Date(Date.now() - 300 * DAY_MS), new Date(Date.now() + 10 * DAY_MS))],
  ] as const) {
    const { admin, created } = fakeAdmin(ca);
    const paths = nodeStoragePaths({ stateDir: t.testdir(), runDir: '/run/vkvm' });
    await ensureProvisionerCredentials(admin, { nodeName: 'box', server: 'https://127.0.0.1:6443', caPem: ca.pem, paths });
    await writeFile(paths.pem, cert);
    await ensureProvisionerCredentials(admin, { nodeName: 'box', server: 'https://127.0.0.1:6443', caPem: ca.pem, paths });
    t.equal(created.length, 2, `a certificate ${what} is replaced`);
    t.not(await readFile(paths.pem, 'utf8'), cert, `by a new one (${what})`);
  }
});
