import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { podCpuRequestMillicores } from './fit.js';

const pod = (spec: Partial<NonNullable<V1Pod['spec']>>): V1Pod => ({ spec: { containers: [], ...spec } });
const requesting = (cpu?: string) => ({ name: 'c', ...(cpu ? { resources: { requests: { cpu } } } : {}) });

t.test('a pod’s CPU request is what the kubelet sizes its cgroup by', async (t) => {
  const cases: Array<[string, V1Pod, number]> = [
    ['no request', pod({ containers: [requesting()] }), 0],
    ['100m', pod({ containers: [requesting('100m')] }), 100],
    ['0.1 (no float error)', pod({ containers: [requesting('0.1')] }), 100],
    ['1', pod({ containers: [requesting('1')] }), 1000],
    ['32', pod({ containers: [requesting('32')] }), 32000],
    ['below a millicore rounds up', pod({ containers: [requesting('100u')] }), 1],
    ['containers summed', pod({ containers: [requesting('250m'), requesting('500m')] }), 750],
    ['a larger init container wins', pod({ containers: [requesting('250m')], initContainers: [requesting('2')] }), 2000],
    ['plus the overhead', pod({ containers: [requesting('1')], overhead: { cpu: '50m' } }), 1050],
  ];
  t.same(
    cases.map(([name, p]) => [name, podCpuRequestMillicores(p)]),
    cases.map(([name, , m]) => [name, m]),
  );
});
