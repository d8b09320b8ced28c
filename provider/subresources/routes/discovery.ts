// What an aggregated API server answers about itself: the group, its one
// version and the subresources in it (the aggregator reads these for
// discovery), the server version (`virtctl version`) and health.
import type { FastifyInstance } from 'fastify';
import { VKVM_VERSION } from '../../node/status.js';
import { GROUP, VERSION } from '../auth.js';

const GROUP_VERSION = `${GROUP}/${VERSION}`;

const apiGroup = {
  name: GROUP,
  versions: [{ groupVersion: GROUP_VERSION, version: VERSION }],
  preferredVersion: { groupVersion: GROUP_VERSION, version: VERSION },
};

/** The subresources served, as KubeVirt lists them (no kind; verbs as the authorizer maps the method). */
const RESOURCES: ReadonlyArray<[string, string[]]> = [
  ['virtualmachines/start', ['update']],
  ['virtualmachines/stop', ['update']],
  ['virtualmachines/restart', ['update']],
  ['virtualmachines/migrate', ['update']],
  ['virtualmachines/expand-spec', ['get']],
  ['expand-vm-spec', ['update']],
  ['virtualmachineinstances/pause', ['update']],
  ['virtualmachineinstances/unpause', ['update']],
  ['virtualmachineinstances/softreboot', ['update']],
  ['virtualmachineinstances/console', ['get']],
  ['virtualmachineinstances/guestosinfo', ['get']],
  ['virtualmachineinstances/userlist', ['get']],
  ['virtualmachineinstances/filesystemlist', ['get']],
];

/** version.Info as KubeVirt's client-go decodes it. */
export function serverVersion(): Record<string, string> {
  return {
    gitVersion: `v${VKVM_VERSION}`,
    gitCommit: '',
    gitTreeState: '',
    buildDate: '',
    goVersion: '',
    compiler: 'vkvm',
    platform: `${process.platform}/${process.arch === 'x64' ? 'amd64' : process.arch}`,
  };
}

export async function discoveryRoutes(app: FastifyInstance): Promise<void> {
  app.get('/apis', async () => ({ kind: 'APIGroupList', apiVersion: 'v1', groups: [apiGroup] }));
  app.get(`/apis/${GROUP}`, async () => ({ kind: 'APIGroup', apiVersion: 'v1', ...apiGroup }));
  app.get(`/apis/${GROUP_VERSION}`, async () => ({
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: GROUP_VERSION,
    resources: RESOURCES.map(([name, verbs]) => ({ name, singularName: '', namespaced: true, kind: '', verbs })),
  }));
  app.get(`/apis/${GROUP_VERSION}/version`, async () => serverVersion());
  for (const path of ['/healthz', `/apis/${GROUP_VERSION}/healthz`]) {
    app.get(path, async (_req, reply) => reply.type('text/plain').send('ok'));
  }
}
