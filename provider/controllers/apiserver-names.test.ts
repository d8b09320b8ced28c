import { webcrypto } from 'node:crypto';
import { createServer } from 'node:tls';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { EC, issue, newCa } from '../../test/helpers/fake-ca.js';
import { presentedNames, sanKey } from './apiserver-names.js';

t.test('SANs compare by one form: IPs normalized, DNS names lower case without the root dot', async (t) => {
  t.same(['2001:DB8:0:0:0:0:0:1', '2001:db8::1', '192.0.2.1', 'API.Example.com.', 'api.example.com'].map(sanKey), [
    '2001:db8::1',
    '2001:db8::1',
    '192.0.2.1',
    'api.example.com',
    'api.example.com',
  ]);
});

t.test('the names of the certificate a server presents are read without trusting it', async (t) => {
  const ca = await newCa();
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const sans = new x509.SubjectAlternativeNameExtension([
    { type: 'dns', value: 'api.example.test' },
    { type: 'ip', value: '127.0.0.1' },
    { type: 'ip', value: '2001:db8::1' },
  ]);
  const cert = await issue(ca, keys.publicKey, 'CN=kube-apiserver', new Date(Date.now() - 60_000), new Date(Date.now() + 3600_000), [sans]);
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  const server = createServer({ cert, key: `-----BEGIN PRIVATE KEY-----\n${pkcs8}\n-----END PRIVATE KEY-----\n` });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const names = await presentedNames('127.0.0.1', (server.address() as AddressInfo).port, undefined);
  t.same(names.map(sanKey), ['api.example.test', '127.0.0.1', '2001:db8::1']);
});
