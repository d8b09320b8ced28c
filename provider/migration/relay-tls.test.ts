import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import t from 'tap';
import { kubeconfigClientCredentials } from './relay-tls.js';

const b64 = (s: string): string => Buffer.from(s).toString('base64');

function kubeconfig(user: Record<string, string>, cluster: Record<string, string> = { 'certificate-authority-data': b64('CA') }) {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: 'c',
        server: 'https://127.0.0.1:6443',
        caData: cluster['certificate-authority-data'],
        caFile: cluster['certificate-authority'],
      },
    ],
    users: [
      {
        name: 'u',
        certData: user['client-certificate-data'],
        keyData: user['client-key-data'],
        certFile: user['client-certificate'],
        keyFile: user['client-key'],
      },
    ],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

t.test("the node's client credentials come from the kubeconfig, inline or from its rotating file, read on every call", async (t) => {
  const dir = t.testdir();
  const pem = join(dir, 'node.pem');
  await writeFile(pem, 'CERT AND KEY v1');
  const fromFile = kubeconfig({ 'client-certificate': pem, 'client-key': pem });
  const first = await kubeconfigClientCredentials(fromFile);
  await writeFile(pem, 'CERT AND KEY v2');
  t.same(
    {
      inline: await kubeconfigClientCredentials(kubeconfig({ 'client-certificate-data': b64('CERT'), 'client-key-data': b64('KEY') })),
      first,
      rotated: await kubeconfigClientCredentials(fromFile),
    },
    {
      inline: { caPem: 'CA', certPem: 'CERT', keyPem: 'KEY' },
      first: { caPem: 'CA', certPem: 'CERT AND KEY v1', keyPem: 'CERT AND KEY v1' },
      rotated: { caPem: 'CA', certPem: 'CERT AND KEY v2', keyPem: 'CERT AND KEY v2' },
    },
  );
});

t.test('a kubeconfig without a client certificate says the relay needs one', async (t) => {
  await t.rejects(kubeconfigClientCredentials(kubeconfig({})), {
    message: "the kubeconfig names no client certificate; the migration relay dials with the node's client certificate",
  });
});
