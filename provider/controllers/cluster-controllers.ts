// The cluster-wide controllers (KubeVirt's virt-controller role): the VM,
// VMI, migration and evacuation controllers, the replica set and pool controllers, and the kubelet-serving CSR approver, run by whichever vkvm process holds the Lease
// kube-system/vkvm-controllers. Informers and queues exist only while this
// process leads: each term builds them afresh and losing the lease stops
// them, so two processes never act on the same objects for longer than the
// lease's renew deadline.
import { hostname } from 'node:os';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { ServingCsrApprover } from './serving-approver.js';
import type { ServingCsrPolicy } from './serving-policy.js';
import { NodeVmiGrants } from './node-vmi-grant.js';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { createEventRecorder } from '../kube/events.js';
import { ClusterInformer } from '../kube/informer.js';
import { CRDS_MISSING_HINT, KubevirtApi, watchPath } from '../kubevirt/client.js';
import { LAUNCHER_SELECTOR, SCHEDULABLE_LABEL } from './launcher-pod.js';
import { LeaderElector } from './leader.js';
import {
  VM_PLURAL,
  VMI_PLURAL,
  VMIM_PLURAL,
  type EvictionStrategy,
  type VirtualMachine,
  type VirtualMachineInstance,
  type VirtualMachineInstanceMigration,
} from '../kubevirt/types.js';
import { EvacuationController } from './migration/evacuation-controller.js';
import { MigrationController } from './migration/migration-controller.js';
import { KUBEVIRT_MIGRATION_DEFAULTS, type MigrationDefaults } from './migration/policy.js';
import { createReplicaControllers, type ReplicaControllers } from './replicas/replica-controllers.js';
import { VmController } from './vm-controller.js';
import { Instancetypes, kubeInstancetypeStore } from './instancetypes.js';
import { VmiController } from './vmi-controller.js';
import type { DataVolume } from '../kubevirt/datavolume-types.js';
import { createDataVolumeController, dataVolumeInformer, type DataVolumes } from './datavolumes/datavolumes.js';
import { VmDataVolumes } from './vm-datavolumes.js';

export interface ControllersOptions {
  /** Lease holder identity; default <hostname>_<pid>. */
  identity?: string;
  leaseName?: string;
  leaseNamespace?: string;
  leaseDurationS?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Concurrent syncs per controller. */
  workers?: number;
  /** What node serving certificates may hold; default: no IP SAN, no DNS SAN but the node name. */
  servingCsr?: ServingCsrPolicy;
  /** Live migration limits and settings; default KubeVirt's. */
  migration?: MigrationDefaults;
  /** The cluster's evictionStrategy, for VMIs that set none; default None, as KubeVirt's. */
  evictionStrategy?: EvictionStrategy;
  /**
   * Run at the start of each leadership term, retried with back-off until it
   * succeeds or the term ends: points the subresource API's registration at
   * this process.
   */
  onLeading?: () => Promise<void>;
}

export const CONTROLLERS_LEASE = { name: 'vkvm-controllers', namespace: 'kube-system' } as const;

export interface RunningControllers {
  readonly leading: boolean;
  /** Stops the controllers and gives up the lease, so another process takes over at once. */
  stop(): Promise<void>;
}

/** One leadership term: fresh caches and queues. */
class ControllerTerm {
  private readonly vms: ClusterInformer<VirtualMachine>;
  private readonly vmis: ClusterInformer<VirtualMachineInstance>;
  private readonly vmims: ClusterInformer<VirtualMachineInstanceMigration>;
  private readonly pods: ClusterInformer<V1Pod>;
  private readonly nodes: ClusterInformer<V1Node>;
  private readonly vmController: VmController;
  private readonly vmiController: VmiController;
  private readonly migrationController: MigrationController;
  private readonly evacuationController: EvacuationController;
  private readonly csrApprover: ServingCsrApprover;
  /** VirtualMachineInstanceReplicaSets and VirtualMachinePools, over the VM and VMI caches. */
  private readonly replicas: ReplicaControllers;
  /** Every DataVolume (vkvm's or CDI's): the VM controller wakes a VM when one of its DataVolumes changes. */
  private readonly dataVolumeInformer: ClusterInformer<DataVolume>;
  /** DataVolumes, where vkvm serves them (CDI not installed). */
  private readonly dataVolumes: DataVolumes;
  private stopped = false;

  constructor(
    clients: KubeClients,
    private readonly log: Logger,
    workers: number | undefined,
    servingCsr: ServingCsrPolicy,
    migration: MigrationDefaults,
    evictionStrategy: EvictionStrategy,
  ) {
    // KubeVirt's event sources, so `kubectl get events` reads the same.
    const events = (component: string) =>
      createEventRecorder(clients, { component, host: hostname() }, log.child({ component: `${component}-events` }));
    const kubevirt = new KubevirtApi(clients);
    const missingHint = CRDS_MISSING_HINT;
    this.vms = new ClusterInformer({
      clients,
      path: watchPath(VM_PLURAL),
      list: () => kubevirt.listVms(),
      missingHint,
      log: log.child({ component: 'vm-informer' }),
    });
    this.vmis = new ClusterInformer({
      clients,
      path: watchPath(VMI_PLURAL),
      list: () => kubevirt.listVmis(),
      missingHint,
      log: log.child({ component: 'vmi-informer' }),
    });
    this.vmims = new ClusterInformer({
      clients,
      path: watchPath(VMIM_PLURAL),
      list: () => kubevirt.listVmims(),
      missingHint,
      log: log.child({ component: 'vmim-informer' }),
    });
    this.pods = new ClusterInformer<V1Pod>({
      clients,
      path: '/api/v1/pods',
      list: () => clients.core.listPodForAllNamespaces({ labelSelector: LAUNCHER_SELECTOR }),
      labelSelector: LAUNCHER_SELECTOR,
      log: log.child({ component: 'launcher-pod-informer' }),
    });
    const schedulable = `${SCHEDULABLE_LABEL}=true`;
    this.nodes = new ClusterInformer<V1Node>({
      clients,
      path: '/api/v1/nodes',
      list: () => clients.core.listNode({ labelSelector: schedulable }),
      labelSelector: schedulable,
      log: log.child({ component: 'node-informer' }),
    });
    this.dataVolumeInformer = dataVolumeInformer(clients, log);
    const w = workers !== undefined ? { workers } : {};
    this.vmController = new VmController({
      kubevirt,
      vms: this.vms,
      vmis: this.vmis,
      events: events('virtualmachine-controller'),
      instancetypes: new Instancetypes(kubeInstancetypeStore(clients)),
      dataVolumes: new VmDataVolumes(clients.custom),
      dataVolumeEvents: this.dataVolumeInformer,
      log: log.child({ component: 'vm-controller' }),
      ...w,
    });
    this.vmiController = new VmiController({
      clients,
      kubevirt,
      vmis: this.vmis,
      pods: this.pods,
      nodes: this.nodes,
      grants: new NodeVmiGrants(clients),
      events: events('virtualmachineinstance-controller'),
      log: log.child({ component: 'vmi-controller' }),
      ...w,
    });
    this.migrationController = new MigrationController({
      clients,
      kubevirt,
      vmims: this.vmims,
      vmis: this.vmis,
      pods: this.pods,
      nodes: this.nodes,
      defaults: migration,
      events: events('migration-controller'),
      log: log.child({ component: 'migration-controller' }),
      ...w,
    });
    this.evacuationController = new EvacuationController({
      kubevirt,
      vmis: this.vmis,
      vmims: this.vmims,
      pods: this.pods,
      nodes: this.nodes,
      evictionStrategy,
      events: events('evacuation-controller'),
      log: log.child({ component: 'evacuation-controller' }),
    });
    this.replicas = createReplicaControllers({ clients, kubevirt, vms: this.vms, vmis: this.vmis, events, log, ...w });
    // CDI's event source, as its controller records them.
    this.dataVolumes = createDataVolumeController({
      clients,
      dataVolumes: this.dataVolumeInformer,
      events: events('datavolume-controller'),
      log,
      ...w,
    });
    this.csrApprover = new ServingCsrApprover(clients, servingCsr, log.child({ component: 'serving-csr-approver' }));
  }

  /** Runs `step` until it succeeds or this term stops, backing off (with jitter) up to 30 s. */
  async retryWhileLeading(step: () => Promise<void>, log: Logger): Promise<void> {
    for (let delayMs = 1000; !this.stopped; delayMs = Math.min(delayMs * 2, 30_000)) {
      try {
        await step();
        return;
      } catch (err) {
        log.warn({ err, retryInMs: delayMs }, 'leader start-up step failed; retrying');
        await new Promise((resolve) => setTimeout(resolve, delayMs * (0.5 + Math.random() / 2)).unref());
      }
    }
  }

  /** Syncs the caches, then starts both queues; does nothing more if stopped meanwhile. */
  async start(): Promise<void> {
    // The approver has its own cache and queue: nodes' certificates need not wait for the VM caches.
    void this.csrApprover.start();
    // Apart too: its own caches, and nothing to do where CDI serves DataVolumes.
    void this.retryWhileLeading(async () => {
      const serving = await this.dataVolumes.start();
      this.log.info(
        { serving },
        serving ? 'DataVolume controller started' : "DataVolumes are not vkvm's here (CDI, or no CRD): controller idle",
      );
    }, this.log);
    // Not awaited: a cluster without the DataVolume CRD still runs its VMs (a VM's own sync reads its DataVolumes).
    void this.dataVolumeInformer.start();
    const shared = Promise.all([this.vms.start(), this.vmis.start()]);
    // Apart, so that a cluster without the replica CRDs still runs its VMs.
    void Promise.all([shared, this.replicas.sync()]).then(() => {
      if (!this.stopped) this.replicas.start();
    });
    await Promise.all([shared, this.vmims.start(), this.pods.start(), this.nodes.start()]);
    if (this.stopped) return;
    this.vmController.start();
    this.vmiController.start();
    this.migrationController.start();
    this.evacuationController.start();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.vmController.stop();
    this.vmiController.stop();
    this.migrationController.stop();
    this.evacuationController.stop();
    await this.replicas.stop();
    await this.dataVolumes.stop();
    await this.dataVolumeInformer.stop();
    await Promise.all([this.vms.stop(), this.vmis.stop(), this.vmims.stop(), this.pods.stop(), this.nodes.stop(), this.csrApprover.stop()]);
  }
}

export function startControllers(clients: KubeClients, log: Logger, opts: ControllersOptions = {}): RunningControllers {
  const identity = opts.identity ?? `${hostname()}_${process.pid}`;
  const name = opts.leaseName ?? CONTROLLERS_LEASE.name;
  const namespace = opts.leaseNamespace ?? CONTROLLERS_LEASE.namespace;
  let term: ControllerTerm | undefined;
  // Terms start and stop in order, however fast leadership flaps.
  let transitions: Promise<void> = Promise.resolve();
  const then = (step: () => Promise<void>) => {
    transitions = transitions.then(step).catch((err: unknown) => log.error({ err }, 'controller start/stop failed'));
  };
  const elector = new LeaderElector({
    api: clients.coordination,
    name,
    namespace,
    identity,
    leaseDurationS: opts.leaseDurationS ?? 15,
    renewDeadlineMs: opts.renewDeadlineMs ?? 10_000,
    retryPeriodMs: opts.retryPeriodMs ?? 2_000,
    log: log.child({ component: 'leader-election' }),
    onStartedLeading: () =>
      then(async () => {
        const t = new ControllerTerm(
          clients,
          log,
          opts.workers,
          opts.servingCsr ?? { nodeIpRanges: [] },
          opts.migration ?? KUBEVIRT_MIGRATION_DEFAULTS,
          opts.evictionStrategy ?? 'None',
        );
        term = t;
        // Not awaited: a term whose caches never sync must not block its own stop.
        void t.start().catch((err: unknown) => log.error({ err }, 'controllers failed to start'));
        const onLeading = opts.onLeading;
        if (onLeading) void t.retryWhileLeading(onLeading, log);
        log.info('VM and VMI controllers and the serving CSR approver started');
      }),
    onStoppedLeading: () =>
      then(async () => {
        await term?.stop();
        term = undefined;
        log.info('VM and VMI controllers stopped');
      }),
  });
  elector.start();

  return {
    get leading() {
      return elector.isLeader;
    },
    async stop() {
      const wasLeading = elector.isLeader;
      elector.stop();
      await transitions;
      if (wasLeading) await releaseLease(clients, name, namespace, identity, log);
    },
  };
}

/** Gives up the lease if this process still holds it (client-go's ReleaseOnCancel). */
async function releaseLease(clients: KubeClients, name: string, namespace: string, identity: string, log: Logger): Promise<void> {
  try {
    const lease = await clients.coordination.readNamespacedLease({ name, namespace });
    if (lease.spec?.holderIdentity !== identity) return;
    await clients.coordination.replaceNamespacedLease({
      name,
      namespace,
      body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 } },
    });
  } catch (err) {
    log.warn({ err }, 'could not release the controllers lease; another process takes over when it expires');
  }
}
