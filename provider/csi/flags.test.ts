import t from 'tap';
import { ConfigError } from '../config.js';
import { resolveCsiConfig, type CsiFlags } from './flags.js';

const host = { hostname: 'node-a', filesystemBytes: () => 100 * 2 ** 30 };
const base: CsiFlags = { 'csi-dir': '/srv/csi', socket: '/run/csi.sock', 'default-volume-size': '1Gi', 'driver-name': 'csi.vkvm.io' };

t.test('resolveCsiConfig: defaults from the host, sizes as quantities', async (t) => {
  t.same(resolveCsiConfig(base, host, '0.1.0'), {
    socket: '/run/csi.sock',
    config: {
      name: 'csi.vkvm.io',
      version: '0.1.0',
      nodeId: 'node-a',
      dir: '/srv/csi',
      capacityBytes: 100 * 2 ** 30,
      defaultVolumeBytes: 2 ** 30,
      expansion: 'controller',
    },
  });
  t.equal(resolveCsiConfig({ ...base, expansion: 'node' }, host, '0.1.0').config.expansion, 'node', '--expansion=node is taken');
  t.match(resolveCsiConfig({ ...base, capacity: '500Gi', 'node-id': 'n1' }, host, '0.1.0').config, {
    capacityBytes: 500 * 2 ** 30,
    nodeId: 'n1',
  });
  t.equal(
    resolveCsiConfig({ ...base, 'registration-socket': '/var/lib/kubelet/plugins_registry/csi.vkvm.io-reg.sock' }, host, '0.1.0')
      .registrationSocket,
    '/var/lib/kubelet/plugins_registry/csi.vkvm.io-reg.sock',
    'the registration socket is taken as given',
  );
});

t.test('resolveCsiConfig refuses bad flags, naming the flag', async (t) => {
  const cases: Array<[CsiFlags, string]> = [
    [{ ...base, 'csi-dir': undefined }, '--csi-dir'],
    [{ ...base, 'csi-dir': 'relative/dir' }, '--csi-dir'],
    [{ ...base, socket: 'csi.sock' }, '--socket'],
    [{ ...base, socket: `/${'s'.repeat(120)}` }, '--socket'],
    [{ ...base, 'registration-socket': 'reg.sock' }, '--registration-socket'],
    [{ ...base, 'registration-socket': `/${'r'.repeat(120)}` }, '--registration-socket'],
    [{ ...base, 'node-id': 'Bad_Name' }, '--node-id'],
    [{ ...base, capacity: 'lots' }, '--capacity'],
    [{ ...base, capacity: '1Ki' }, '--capacity'],
    [{ ...base, 'default-volume-size': '-1Gi' }, '--default-volume-size'],
    [{ ...base, 'driver-name': 'CSI!' }, '--driver-name'],
    [{ ...base, expansion: 'both' }, '--expansion'],
  ];
  t.same(
    cases.map(([flags]) => {
      try {
        resolveCsiConfig(flags, host, '0.1.0');
        return 'accepted';
      } catch (err) {
        return err instanceof ConfigError ? err.field : String(err);
      }
    }),
    cases.map(([, field]) => field),
  );
});
