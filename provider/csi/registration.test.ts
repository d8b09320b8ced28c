import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { createRootLogger } from '../log.js';
import { loadRegistrationService } from './proto.js';
import { pluginInfo, startRegistrationServer } from './registration.js';

t.test('pluginInfo: a CSI plugin at its endpoint speaking CSI 1.0.0', async (t) => {
  t.same(pluginInfo('csi.vkvm.io', '/var/lib/kubelet/plugins/csi.vkvm.io/csi.sock'), {
    type: 'CSIPlugin',
    name: 'csi.vkvm.io',
    endpoint: '/var/lib/kubelet/plugins/csi.vkvm.io/csi.sock',
    supportedVersions: ['1.0.0'],
  });
});

t.test('the registration socket is 0600 and answers GetInfo and NotifyRegistrationStatus', async (t) => {
  // Short: a unix socket path holds 107 bytes, which tap's fixture dirs exceed.
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-reg-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const socket = join(dir, 'registry', 'csi.vkvm.io-reg.sock');
  const server = await startRegistrationServer({ socket, name: 'csi.vkvm.io', endpoint: '/run/csi.sock', log: createRootLogger('silent') });
  t.teardown(() => server.stop());
  t.equal((await stat(socket)).mode & 0o777, 0o600, 'only root may connect');
  const Registration = loadRegistrationService();
  const client = new Registration(`unix://${socket}`, grpc.credentials.createInsecure()) as unknown as Record<
    string,
    (req: object, cb: (err: Error | null, res: object) => void) => void
  > &
    grpc.Client;
  t.teardown(() => client.close());
  const call = (method: string, req: object) =>
    new Promise<object>((resolve, reject) => client[method]!.call(client, req, (err, res) => (err ? reject(err) : resolve(res))));
  t.same(await call('GetInfo', {}), pluginInfo('csi.vkvm.io', '/run/csi.sock'));
  t.same(await call('NotifyRegistrationStatus', { pluginRegistered: true }), {});
});
