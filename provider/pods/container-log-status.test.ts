import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import t from 'tap';
import { containerLogRefusal } from './container-log-status.js';

const pod = (status?: Partial<V1ContainerStatus>): V1Pod => ({
  metadata: { name: 'test-guest' },
  status: status ? { containerStatuses: [{ name: 'vm', image: 'i', imageID: '', ready: false, restartCount: 0, ...status }] } : {},
});

t.test("a container with no log yet is refused with the kubelet's sentence; one that ran is not", async (t) => {
  const cases: Array<[string, V1Pod, boolean, string | undefined]> = [
    [
      'never started',
      pod({ state: { waiting: { reason: 'CreateContainerError' } } }),
      false,
      'container "vm" in pod "test-guest" is waiting to start: CreateContainerError',
    ],
    [
      'pulling failed',
      pod({ state: { waiting: { reason: 'ErrImagePull' } } }),
      false,
      'container "vm" in pod "test-guest" is waiting to start: image can\'t be pulled',
    ],
    [
      'pull back-off',
      pod({ state: { waiting: { reason: 'ImagePullBackOff' } } }),
      false,
      'container "vm" in pod "test-guest" is waiting to start: trying and failing to pull image',
    ],
    ['no reason', pod({ state: { waiting: {} } }), false, 'container "vm" in pod "test-guest" is waiting to start: no logs yet'],
    ['no status yet', pod(), false, 'container "vm" in pod "test-guest" is not available'],
    ['running', pod({ state: { running: {} } }), false, undefined],
    [
      'waiting after a run (back-off): the last run has a log',
      pod({ state: { waiting: { reason: 'CrashLoopBackOff' } }, lastState: { terminated: { exitCode: 1 } } }),
      false,
      undefined,
    ],
    [
      'previous without a run before',
      pod({ state: { running: {} } }),
      true,
      'previous terminated container "vm" in pod "test-guest" not found',
    ],
    ['previous after a run', pod({ state: { running: {} }, lastState: { terminated: { exitCode: 0 } } }), true, undefined],
  ];
  t.same(
    cases.map(([what, p, previous]) => [what, containerLogRefusal(p, 'vm', previous)]),
    cases.map(([what, , , want]) => [what, want]),
  );
});
