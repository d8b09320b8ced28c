import t from 'tap';
import { freeClusterPorts, freePorts } from './cluster.js';

t.test('free ports chosen together are distinct (a control plane must not get one port for two servers)', async (t) => {
  const ports = await freePorts(64);
  t.equal(new Set(ports).size, 64, 'no port twice');
  t.ok(
    ports.every((p) => p > 0 && p < 65536),
    'real ports',
  );
  const cluster = Object.values(await freeClusterPorts());
  t.equal(new Set(cluster).size, 5, "the control plane's five ports are distinct");
});
