import t from 'tap';
import { pluginRegistryDirOf, registrationSocketIn } from './registry-dir.js';

t.test("the kubelet's registry dir for the host's agent, one of its own for an agent with its own state dir", async (t) => {
  const cases: Array<[string | undefined, string]> = [
    [undefined, '/var/lib/kubelet/plugins_registry'],
    ['/var/lib/vkvm', '/var/lib/kubelet/plugins_registry'],
    ['/var/lib/vkvm/', '/var/lib/kubelet/plugins_registry'],
    ['/var/lib/vkvm-up/nodes/2', '/var/lib/vkvm-up/nodes/2/plugins_registry'],
  ];
  t.same(
    cases.map(([stateDir]) => pluginRegistryDirOf(stateDir)),
    cases.map(([, dir]) => dir),
  );
  t.equal(
    registrationSocketIn('/var/lib/kubelet/plugins_registry', 'csi.vkvm.io'),
    '/var/lib/kubelet/plugins_registry/csi.vkvm.io-reg.sock',
  );
});
