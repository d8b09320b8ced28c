import t from 'tap';
import { startRequest } from './start-request.js';

const paths = { diskPaths: { root: '/d/root.qcow2' }, consoleSocket: '/c', agentSocket: '', vncSocket: '', nvramPath: '', bootPaths: {} };

t.test('StartMigration from the migration settings fixed at the handoff', async (t) => {
  const of = (configuration: Parameters<typeof startRequest>[0]['configuration'], dataBytes = 128 * 2 ** 20) => {
    const r = startRequest({ uid: 'm-1', targetPaths: paths, configuration, dataBytes });
    return { bandwidth: r.bandwidthMiBps, auto: r.autoConverge, progress: r.progressTimeoutS, completion: r.completionTimeoutS };
  };
  t.same(
    [
      of(undefined),
      of({ bandwidthPerMigration: '0', progressTimeout: 150, completionTimeoutPerGiB: 150 }),
      of({ bandwidthPerMigration: '1Mi', allowAutoConverge: true, progressTimeout: 30, completionTimeoutPerGiB: 10 }, 3 * 2 ** 30 + 1),
      of({ bandwidthPerMigration: '100Ki' }),
    ],
    [
      { bandwidth: undefined, auto: undefined, progress: 150, completion: 150 },
      { bandwidth: undefined, auto: undefined, progress: 150, completion: 150 },
      { bandwidth: 1, auto: true, progress: 30, completion: 40 },
      { bandwidth: 1, auto: undefined, progress: 150, completion: 150 },
    ],
    'unlimited by default; a limit in whole MiB/s, never under 1; the completion limit per started GiB',
  );
  t.match(
    startRequest({ uid: 'm-1', targetPaths: paths, configuration: undefined, dataBytes: 1 }),
    {
      destUri: 'qemu+unix:///system?socket=/run/libvirt/m/lv',
      memoryUri: 'unix:///run/libvirt/m/mem',
      disksUri: 'unix:///run/libvirt/m/nbd',
      targetPaths: paths,
    },
    'the relay sockets as the launcher sees them',
  );
});
