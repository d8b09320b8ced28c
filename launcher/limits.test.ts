import t from 'tap';
import { testSpec } from '../vmm/testing/specs.js';
import { cgroupLimits, memoryLimitMiB } from './limits.js';

t.test('memory limit is guest memory plus overhead, more under TCG', async (t) => {
  const spec = testSpec({ memoryMiB: 1024, cpu: { sockets: 1, cores: 2, threads: 1, limitMillicores: 1500 } });
  t.equal(memoryLimitMiB(spec, 'kvm'), 1024 + 16 + 256 + 16);
  t.equal(memoryLimitMiB(spec, 'tcg'), 1024 + 16 + 256 + 16 + 256);
  t.same(cgroupLimits(spec, 'kvm', 'running'), {
    memoryBytes: 1312 * 1024 * 1024,
    cpuMillicores: 1500,
    cpuWeight: { shares: 2 },
    pidsMax: 1024,
  });
  t.same(
    cgroupLimits(spec, 'kvm', 'starting'),
    { memoryBytes: 1312 * 1024 * 1024, cpuMillicores: 1500, cpuWeight: 'default', pidsMax: 1024 },
    "before the vCPUs run: the limits, and the system's default weight",
  );
  t.notOk('cpuMillicores' in cgroupLimits(testSpec(), 'kvm', 'starting'), 'no quota without a CPU limit');
  t.equal(memoryLimitMiB({ ...spec, vnc: true }, 'kvm'), 1024 + 16 + 256 + 16 + 16, 'a VNC display adds its video memory');
});

t.test('the CPU request becomes shares as the kubelet computes them', async (t) => {
  const withRequest = (requestMillicores?: number) =>
    cgroupLimits(
      testSpec({ cpu: { sockets: 32, cores: 1, threads: 1, ...(requestMillicores !== undefined ? { requestMillicores } : {}) } }),
      'kvm',
      'running',
    ).cpuWeight;
  t.same(
    [withRequest(), withRequest(0), withRequest(100), withRequest(32_000)],
    [{ shares: 2 }, { shares: 2 }, { shares: 102 }, { shares: 32_768 }],
    'none, 0, 100m, 32 cores',
  );
});
