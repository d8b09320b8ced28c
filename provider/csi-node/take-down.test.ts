import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { KubeClients } from '../kube/client.js';
import { takeDownCsiVolumes } from './take-down.js';

/** An API server that accepts connections and never answers (a control plane gone behind a TCP black hole); records every call. */
function unansweringClients(calls: string[]): KubeClients {
  const api = (group: string) =>
    new Proxy(
      {},
      {
        get: (_, method) => () => {
          calls.push(`${group}.${String(method)}`);
          return new Promise(() => undefined);
        },
      },
    );
  return new Proxy({} as KubeClients, { get: (_, group) => api(String(group)) });
}

t.test('takeDownCsiVolumes finishes without asking an API server that never answers', async (t) => {
  const stateDir = t.testdir({ pods: {} });
  const calls: string[] = [];
  const done = takeDownCsiVolumes({
    stateDir,
    pluginRegistryDir: join(stateDir, 'plugins_registry'),
    nodeName: 'n1',
    clients: unansweringClients(calls),
    log: pino({ level: 'silent' }),
  }).then(() => 'finished');
  let timer: NodeJS.Timeout | undefined;
  const stalled = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('stalled'), 5000)));
  const outcome = await Promise.race([done, stalled]);
  clearTimeout(timer);
  t.same({ outcome, calls }, { outcome: 'finished', calls: [] }, 'the take-down neither waits on nor calls the API server');
});
