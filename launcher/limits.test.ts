import t from 'tap';
import { testSpec } from '../vmm/testing/specs.js';
import { cgroupLimits, memoryLimitMiB } from './limits.js';

t.test('memory limit is guest memory plus overhead, more under TCG', async (t) => {
  const spec = testSpec({ memoryMiB: 1024, cpu: { sockets: 1, cores: 2, threads: 1, limitMillicores: 1500 } });
  t.equal(memoryLimitMiB(spec, 'kvm'), 1024 + 16 + 256 + 16);
  t.equal(memoryLimitMiB(spec, 'tcg'), 1024 + 16 + 256 + 16 + 256);
  t.same(cgroupLimits(spec, 'kvm'), { memoryBytes: 1312 * 1024 * 1024, cpuMillicores: 1500, pidsMax: 1024 });
  t.notOk('cpuMillicores' in cgroupLimits(testSpec(), 'kvm'), 'no quota without a CPU limit');
  t.equal(memoryLimitMiB({ ...spec, vnc: true }, 'kvm'), 1024 + 16 + 256 + 16 + 16, 'a VNC display adds its video memory');
});
