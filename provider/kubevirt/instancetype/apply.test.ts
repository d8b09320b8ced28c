import t from 'tap';
import { applyInstancetype, cpuTopology, instancetypeConflicts, unsupportedInstancetypeFields } from './apply.js';
import type { InstancetypeSpec, PreferenceSpec, VirtualMachineInstanceSpec } from '../types.js';

const u1small: InstancetypeSpec = { cpu: { guest: 1 }, memory: { guest: '2Gi' } };
const spec = (domain: VirtualMachineInstanceSpec['domain'], rest: Partial<VirtualMachineInstanceSpec> = {}) =>
  ({ domain, ...rest }) as VirtualMachineInstanceSpec;

t.test("conflicts are the VMI fields KubeVirt's applier refuses beside an instancetype, each by its path", async (t) => {
  const at = 'spec.template.spec';
  const cases: Array<[string, InstancetypeSpec, VirtualMachineInstanceSpec, Record<string, string>, string[]]> = [
    ['nothing set', u1small, spec({}), {}, []],
    [
      'sockets, cores, threads',
      u1small,
      spec({ cpu: { sockets: 2, cores: 1, threads: 0 } }),
      {},
      [`${at}.domain.cpu.sockets`, `${at}.domain.cpu.cores`],
    ],
    [
      'a cpu request and limit',
      u1small,
      spec({ resources: { requests: { cpu: '1' }, limits: { cpu: '2' } } }),
      {},
      [`${at}.domain.resources.requests.cpu`, `${at}.domain.resources.limits.cpu`],
    ],
    [
      'memory: the first only',
      u1small,
      spec({ memory: { guest: '1Gi' }, resources: { requests: { memory: '1Gi' } } }),
      {},
      [`${at}.domain.memory`],
    ],
    ['a model only when the instancetype has one', u1small, spec({ cpu: { model: 'host-model' } }), {}, []],
    [
      'a model both set',
      { ...u1small, cpu: { guest: 1, model: 'Haswell' } },
      spec({ cpu: { model: 'host-model' } }),
      {},
      [`${at}.domain.cpu.model`],
    ],
    [
      'a node selector both set',
      { ...u1small, nodeSelector: { a: 'b' } },
      spec({}, { nodeSelector: { c: 'd' } }),
      {},
      [`${at}.nodeSelector`],
    ],
    [
      'an ioThreadsPolicy both set',
      { ...u1small, ioThreadsPolicy: 'auto' },
      spec({ ioThreadsPolicy: 'shared' }),
      {},
      [`${at}.domain.ioThreadsPolicy`],
    ],
    ['an annotation of another value', { ...u1small, annotations: { x: '1', y: '2' } }, spec({}), { x: '1', y: '3' }, ['annotations.y']],
  ];
  for (const [what, it, vmi, annotations, expected] of cases) t.same(instancetypeConflicts(it, vmi, annotations, at), expected, what);
});

t.test("the vCPUs take the preference's topology, sockets by default (KubeVirt's applyGuestCPUTopology)", async (t) => {
  const pref = (cpu: PreferenceSpec['cpu'], ratio?: number): PreferenceSpec => ({
    cpu,
    ...(ratio ? { preferSpreadSocketToCoreRatio: ratio } : {}),
  });
  const cases: Array<[string, number, PreferenceSpec | undefined, object]> = [
    ['one vCPU', 1, pref({ preferredCPUTopology: 'cores' }), { sockets: 1, cores: 1, threads: 1 }],
    ['no preference', 4, undefined, { sockets: 4, cores: 1, threads: 1 }],
    ['cores', 4, pref({ preferredCPUTopology: 'cores' }), { sockets: 1, cores: 4, threads: 1 }],
    ['the deprecated preferThreads', 4, pref({ preferredCPUTopology: 'preferThreads' }), { sockets: 1, cores: 1, threads: 4 }],
    ['any is sockets', 4, pref({ preferredCPUTopology: 'any' }), { sockets: 4, cores: 1, threads: 1 }],
    ['spread: 2 cores a socket', 8, pref({ preferredCPUTopology: 'spread' }), { sockets: 4, cores: 2, threads: 1 }],
    [
      'spread across cores and threads',
      8,
      pref({ preferredCPUTopology: 'spread', spreadOptions: { across: 'CoresThreads', ratio: 4 } }),
      { sockets: 1, cores: 2, threads: 4 },
    ],
    [
      'spread across all three',
      8,
      pref({ preferredCPUTopology: 'spread', spreadOptions: { across: 'SocketsCoresThreads' } }),
      { sockets: 2, cores: 2, threads: 2 },
    ],
    ['the old ratio field', 6, pref({ preferredCPUTopology: 'spread' }, 3), { sockets: 2, cores: 3, threads: 1 }],
  ];
  for (const [what, vcpus, p, expected] of cases) t.same(cpuTopology(vcpus, p), expected, what);
});

t.test('applied: topology, memory (an overcommit lowers the request), model, node selector, ioThreadsPolicy, annotations', async (t) => {
  const it: InstancetypeSpec = {
    cpu: { guest: 2, model: 'Haswell' },
    memory: { guest: '1Gi', overcommitPercent: 25 },
    nodeSelector: { zone: 'a' },
    ioThreadsPolicy: 'auto',
    annotations: { from: 'instancetype' },
  };
  t.same(
    applyInstancetype(it, undefined, spec({ devices: {} }), { mine: 'x' }, 'spec'),
    {
      conflicts: [],
      spec: {
        domain: {
          devices: {},
          cpu: { model: 'Haswell', sockets: 2, cores: 1, threads: 1 },
          memory: { guest: '1Gi' },
          resources: { requests: { memory: String(0.75 * 2 ** 30) } },
          ioThreadsPolicy: 'auto',
        },
        nodeSelector: { zone: 'a' },
      },
      annotations: { from: 'instancetype', mine: 'x' },
    },
    'the VMI spec as KubeVirt applies it',
  );
  t.same(
    applyInstancetype(u1small, undefined, spec({ cpu: { cores: 2 } }), {}, 'spec'),
    { conflicts: ['spec.domain.cpu.cores'] },
    'a conflict applies nothing',
  );
});

t.test("what of an instancetype vkvm cannot honour is named, as in common-instancetypes' cx1 series", async (t) => {
  const cx1 = {
    cpu: { dedicatedCPUPlacement: true, guest: 2, isolateEmulatorThread: true, numa: { guestMappingPassthrough: {} } },
    ioThreadsPolicy: 'auto',
    memory: { guest: '4Gi', hugepages: { pageSize: '2Mi' } },
  } as unknown as InstancetypeSpec;
  t.same(
    unsupportedInstancetypeFields(cx1),
    ['spec.cpu.dedicatedCPUPlacement', 'spec.cpu.isolateEmulatorThread', 'spec.cpu.numa', 'spec.memory.hugepages'],
    'ioThreadsPolicy auto is honoured',
  );
  t.same(
    unsupportedInstancetypeFields({ cpu: { guest: 1 }, memory: { guest: '512Mi', overcommitPercent: 50 } }),
    [],
    "o1's overcommit is honoured",
  );
});
