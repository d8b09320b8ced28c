import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createRootLogger } from '../log.js';
import type { KubeClients } from '../kube/client.js';
import type { DriverClient } from './driver-client.js';
import type { RegisteredDriver } from './plugin-watcher.js';
import { PodVolumes } from './pod-volumes.js';
import { publishPath, stagingPath, type CsiVolume } from './volume.js';

const volume = (pvName: string, volumeHandle: string): CsiVolume => ({
  pvName,
  driver: 'csi.vkvm.io',
  volumeHandle,
  volumeAttributes: {},
  volumeMode: 'Filesystem',
  accessMode: 'SINGLE_NODE_WRITER',
  readOnly: false,
});
const notFound = Object.assign(new Error('not found'), { code: 404 });

/** A driver that stages, and records its calls; publish makes the target directory as a driver does, unpublish removes it. */
function fakeDriver(calls: string[], failing?: string): RegisteredDriver {
  const client: DriverClient = {
    node: async (method, req) => {
      const r = req as { volumeId?: string; targetPath?: string };
      calls.push(`${method} ${r.volumeId ?? ''}`.trim());
      if (method === failing) throw new Error('14 UNAVAILABLE: No connection established');
      if (method === 'NodeGetCapabilities') return { capabilities: [{ rpc: { type: 'STAGE_UNSTAGE_VOLUME' } }] };
      if (method === 'NodePublishVolume') await mkdir(r.targetPath!, { recursive: true });
      if (method === 'NodeUnpublishVolume') await rm(r.targetPath!, { recursive: true, force: true });
      return {};
    },
    close: () => undefined,
  };
  return {
    name: 'csi.vkvm.io',
    endpoint: '/run/csi.sock',
    socket: '/reg/csi.sock',
    entry: { name: 'csi.vkvm.io', nodeID: 'n' },
    topology: {},
    client,
  };
}

function setup(t: Test, registered = true, failing?: string) {
  const root = t.testdir();
  const calls: string[] = [];
  const driver = fakeDriver(calls, failing);
  const clients = {
    storage: { readCSIDriver: async () => Promise.reject(notFound), readVolumeAttachment: async () => ({ status: { attached: true } }) },
    core: {},
  } as unknown as Pick<KubeClients, 'core' | 'storage'>;
  const volumes = new PodVolumes({
    root,
    nodeName: 'n',
    drivers: { driver: () => (registered ? driver : undefined) },
    clients,
    log: createRootLogger('silent'),
  });
  return { root, calls, volumes };
}

const tree = async (dir: string): Promise<string[]> =>
  (await readdir(dir, { recursive: true }).catch(() => [] as string[])).map(String).sort();

t.test('up: attach waited for (no CSIDriver), staged, published; down: unpublished, unstaged, nothing left', async (t) => {
  const { root, calls, volumes } = setup(t);
  const v = volume('pv-1', 'vol-1');
  await volumes.publish('uid-1', [v]);
  t.same(calls, ['NodeGetCapabilities', 'NodeStageVolume vol-1', 'NodePublishVolume vol-1'], 'stage, then publish');
  t.ok(
    (await tree(root)).includes(join('pods', 'uid-1', 'volumes', 'kubernetes.io~csi', 'pv-1', 'vol_data.json')),
    'the publication is recorded',
  );
  t.ok(
    (await tree(root)).some((p) => stagingPath(root, v).endsWith(p)),
    'the staging path is made',
  );
  calls.length = 0;
  await volumes.unpublishPod('uid-1');
  t.same(calls, ['NodeUnpublishVolume vol-1', 'NodeUnstageVolume vol-1'], 'unpublish, then unstage');
  t.same(await tree(root), [], 'no record or directory left');
});

t.test('a volume two pods publish stays staged until the second goes', async (t) => {
  const { root, calls, volumes } = setup(t);
  const v = volume('pv-1', 'vol-1');
  await volumes.publish('uid-1', [v]);
  await volumes.publish('uid-2', [v]);
  calls.length = 0;
  await volumes.unpublishPod('uid-1');
  t.same(calls, ['NodeUnpublishVolume vol-1'], 'only unpublished while another pod uses it');
  await volumes.retainOnly((uid) => uid === 'uid-2');
  t.same(calls, ['NodeUnpublishVolume vol-1'], 'the sweep leaves the pod in use alone');
  await volumes.retainOnly(() => false);
  t.same(calls, ['NodeUnpublishVolume vol-1', 'NodeUnpublishVolume vol-1', 'NodeUnstageVolume vol-1'], 'the sweep takes down the last');
  t.same(await tree(root), [], 'nothing left');
  t.equal(publishPath(root, 'uid-2', v), join(root, 'pods', 'uid-2', 'volumes', 'kubernetes.io~csi', 'pv-1', 'mount'));
});

t.test('a staging no publication needs (a crash before the record) is unstaged by the sweep', async (t) => {
  const { root, calls, volumes } = setup(t);
  await volumes.publish('uid-1', [volume('pv-1', 'vol-1')]);
  // As if the agent had crashed after the stage: the pod's record never written.
  await rm(join(root, 'pods'), { recursive: true });
  calls.length = 0;
  await volumes.retainOnly(() => false);
  t.same(calls, ['NodeUnstageVolume vol-1'], 'unstaged');
  t.same(await tree(root), [], 'nothing left');
});

t.test('a driver not registered: publishing is refused naming it, and nothing is made', async (t) => {
  const { root, volumes } = setup(t, false);
  await t.rejects(volumes.publish('uid-1', [volume('pv-1', 'vol-1')]), {
    name: 'CsiDriverNotRegisteredError',
    driver: 'csi.vkvm.io',
    message: /CSI driver csi\.vkvm\.io of volume pv-1 is not registered on node n/,
  });
  t.same(await tree(root), [], 'no record or directory');
});

t.test('a registered driver that does not answer: the failure names the volume and the driver', async (t) => {
  const { volumes } = setup(t, true, 'NodeStageVolume');
  await t.rejects(volumes.publish('uid-1', [volume('pv-1', 'vol-1')]), {
    message: 'volume pv-1 of CSI driver csi.vkvm.io: 14 UNAVAILABLE: No connection established',
  });
});
