// The VirtualMachineInstanceReplicaSet and VirtualMachinePool controllers as
// one part of a leadership term (cluster-controllers.ts): their own two
// caches, and the term's VM and VMI caches they share.
import type { KubeClients } from '../../kube/client.js';
import type { EventRecorder } from '../../kube/events.js';
import { ClusterInformer } from '../../kube/informer.js';
import type { Logger } from '../../log.js';
import { CRDS_MISSING_HINT, type KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstanceReplicaSet, VirtualMachinePool } from '../../kubevirt/replica-types.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../kubevirt/types.js';
import { PoolController } from './pool-controller.js';
import { POOL_WATCH_PATH, ReplicaApi, VMIRS_WATCH_PATH } from './replica-api.js';
import { ReplicaSetController } from './replicaset-controller.js';

export interface ReplicaControllersOptions {
  clients: KubeClients;
  kubevirt: KubevirtApi;
  vms: ClusterInformer<VirtualMachine>;
  vmis: ClusterInformer<VirtualMachineInstance>;
  /** An event recorder for a KubeVirt component name. */
  events: (component: string) => EventRecorder;
  workers?: number;
  log: Logger;
}

export interface ReplicaControllers {
  /** Resolves once the replica sets' and pools' caches hold a first list. */
  sync(): Promise<void>;
  /** Starts the queues; call once every cache they read is synced. */
  start(): void;
  stop(): Promise<void>;
}

export function createReplicaControllers(o: ReplicaControllersOptions): ReplicaControllers {
  const api = new ReplicaApi(o.clients);
  const w = o.workers !== undefined ? { workers: o.workers } : {};
  const replicaSets = new ClusterInformer<VirtualMachineInstanceReplicaSet>({
    clients: o.clients,
    path: VMIRS_WATCH_PATH,
    list: () => api.listReplicaSets(),
    missingHint: CRDS_MISSING_HINT,
    log: o.log.child({ component: 'vmirs-informer' }),
  });
  const pools = new ClusterInformer<VirtualMachinePool>({
    clients: o.clients,
    path: POOL_WATCH_PATH,
    list: () => api.listPools(),
    missingHint: CRDS_MISSING_HINT,
    log: o.log.child({ component: 'vmpool-informer' }),
  });
  const replicaSetController = new ReplicaSetController({
    api,
    kubevirt: o.kubevirt,
    replicaSets,
    vmis: o.vmis,
    events: o.events('virtualmachinereplicaset-controller'),
    log: o.log.child({ component: 'replicaset-controller' }),
    ...w,
  });
  const poolController = new PoolController({
    api,
    kubevirt: o.kubevirt,
    pools,
    vms: o.vms,
    vmis: o.vmis,
    events: o.events('virtualmachinepool-controller'),
    log: o.log.child({ component: 'pool-controller' }),
    ...w,
  });
  return {
    sync: async () => {
      await Promise.all([replicaSets.start(), pools.start()]);
    },
    start: () => {
      replicaSetController.start();
      poolController.start();
    },
    stop: async () => {
      replicaSetController.stop();
      poolController.stop();
      await Promise.all([replicaSets.stop(), pools.stop()]);
    },
  };
}
