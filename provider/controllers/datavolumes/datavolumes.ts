// The DataVolume controller as one part of a leadership term
// (cluster-controllers.ts): its caches of DataVolumes and claims, started only
// where vkvm serves DataVolumes, that is where the CRD is vkvm's. Where CDI
// installed it, CDI's own controllers write DataVolume status and make the
// claims, and this part does nothing (one writer per status).
import type { V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import type { EventRecorder } from '../../kube/events.js';
import { isNotFound } from '../../kube/errors.js';
import { ClusterInformer } from '../../kube/informer.js';
import type { Logger } from '../../log.js';
import { DATAVOLUME_CRD_NAME, type DataVolume } from '../../kubevirt/datavolume-types.js';
import type { KubevirtList } from '../../kubevirt/client.js';
import { DataVolumeController, DATAVOLUME_WATCH_PATH, DATAVOLUMES } from './datavolume-controller.js';

/** The label vkvm up puts on the CRDs it installs (provider/cli/up.ts). */
const PART_OF = 'app.kubernetes.io/part-of';

/** Whether this cluster's DataVolume CRD is vkvm's (absent or CDI's: false). */
export async function servesDataVolumes(clients: KubeClients): Promise<boolean> {
  try {
    const crd = await clients.objects.read({
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: DATAVOLUME_CRD_NAME },
    });
    return crd.metadata?.labels?.[PART_OF] === 'vkvm';
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

export interface DataVolumes {
  /** Starts the caches and then the queue, if vkvm serves DataVolumes here; resolves with whether it does. */
  start(): Promise<boolean>;
  stop(): Promise<void>;
}

/** The cluster's DataVolumes, whoever serves them: this controller's cache, and the VM controller's wake-ups. */
export function dataVolumeInformer(clients: KubeClients, log: Logger): ClusterInformer<DataVolume> {
  return new ClusterInformer<DataVolume>({
    clients,
    path: DATAVOLUME_WATCH_PATH,
    list: () => clients.custom.listClusterCustomObject(DATAVOLUMES) as Promise<KubevirtList<DataVolume>>,
    missingHint: 'DataVolumes are served by vkvm (its CRDs) or CDI',
    log: log.child({ component: 'datavolume-informer' }),
  });
}

/** `dataVolumes`: the shared informer (dataVolumeInformer), started and stopped by its owner as well. */
export function createDataVolumeController(o: {
  clients: KubeClients;
  dataVolumes: ClusterInformer<DataVolume>;
  events: EventRecorder;
  workers?: number;
  log: Logger;
}): DataVolumes {
  const dataVolumes = o.dataVolumes;
  const claims = new ClusterInformer<V1PersistentVolumeClaim>({
    clients: o.clients,
    path: '/api/v1/persistentvolumeclaims',
    list: () => o.clients.core.listPersistentVolumeClaimForAllNamespaces(),
    log: o.log.child({ component: 'claim-informer' }),
  });
  const storageClasses = new ClusterInformer<V1StorageClass>({
    clients: o.clients,
    path: '/apis/storage.k8s.io/v1/storageclasses',
    list: () => o.clients.storage.listStorageClass(),
    log: o.log.child({ component: 'storageclass-informer' }),
  });
  const controller = new DataVolumeController({
    clients: o.clients,
    dataVolumes,
    claims,
    storageClasses,
    events: o.events,
    ...(o.workers !== undefined ? { workers: o.workers } : {}),
    log: o.log.child({ component: 'datavolume-controller' }),
  });
  let stopped = false;
  let started = false;
  return {
    async start() {
      if (!(await servesDataVolumes(o.clients))) return false;
      if (stopped) return false;
      started = true;
      await Promise.all([dataVolumes.start(), claims.start(), storageClasses.start()]);
      if (!stopped) controller.start();
      return true;
    },
    async stop() {
      stopped = true;
      controller.stop();
      if (started) await Promise.all([claims.stop(), storageClasses.stop()]);
    },
  };
}
