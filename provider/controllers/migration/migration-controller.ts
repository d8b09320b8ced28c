// The migration controller (KubeVirt's virt-controller migration loop,
// cluster side): informer handlers only enqueue VMIM keys; syncMigration
// reads the VMIM, its VMI, both launcher pods and the target Node from the
// caches, asks nextMigration (phases.ts) what comes next, carries out the
// actions (idempotent), then writes the VMIM status and the VMI's
// migrationState copy. It is the one writer of both. Level-triggered: every
// sync starts from what the API holds, so a restarted controller resumes.
//
// Ordering: the finalizer is on before any target pod exists, and the target
// pod exists (asked of the API server, not the cache) before the status says
// Scheduling, so a crash between the two never makes a second pod.
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectReference, type EventRecorder } from '../../kube/events.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../../kube/informer.js';
import { replacing, statusPatch } from '../../kube/status-patch.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import {
  KUBEVIRT_API_VERSION,
  VMI_PLURAL,
  VMIM_PLURAL,
  type VirtualMachineInstance,
  type VirtualMachineInstanceMigration,
} from '../../kubevirt/types.js';
import type { Logger } from '../../log.js';
import { QueuedController } from '../queued-controller.js';
import { MIGRATION_JOB_LABEL } from '../../pods/migration-target.js';
import { launcherPodOf, VMI_NAME_LABEL } from '../launcher-pod.js';
import { WrittenVersions } from '../written-versions.js';
import { migrationRefusal, isUnfinished, VMIM_VMI_LABEL } from './admission.js';
import { nodeView, sourceReport, targetPodView, targetReport } from './evidence.js';
import { isFinal, nextMigration, type Action, type Observed } from './phases.js';
import { matchPolicy, migrationSettings, type MigrationDefaults } from './policy.js';
import { slotRefusal } from './slots.js';
import { evacuationBackoffMs } from './backoff.js';
import { migrationOf, vmimStatusOf, type Settings } from './status.js';
import { migrationTargetPod } from './target-pod.js';
import { ensureTargetGrant } from './target-grant.js';

export const MIGRATION_FINALIZER = 'kubevirt.io/migrationJobFinalize';

export interface MigrationControllerOptions {
  clients: KubeClients;
  kubevirt: KubevirtApi;
  vmims: ClusterInformer<VirtualMachineInstanceMigration>;
  vmis: ClusterInformer<VirtualMachineInstance>;
  /** Launcher pods in every namespace, migration targets among them. */
  pods: ClusterInformer<V1Pod>;
  /** Schedulable nodes. */
  nodes: ClusterInformer<V1Node>;
  defaults: MigrationDefaults;
  events: EventRecorder;
  workers?: number;
  log: Logger;
  now?: () => Date;
}

const VMIM_STATUS_FIELDS = ['phase', 'phaseTransitionTimestamps', 'conditions', 'migrationState'] as const;

export class MigrationController extends QueuedController {
  private readonly written = new WrittenVersions();
  private readonly now: () => Date;

  constructor(private readonly o: MigrationControllerOptions) {
    super({
      name: 'syncMigrationsFromKubernetes',
      workers: o.workers ?? 2,
      log: o.log,
    });
    this.now = o.now ?? (() => new Date());
    o.vmims.onChange((m) => this.enqueue(keyOfObject(m)));
    o.vmis.onChange((vmi) => this.enqueueFor(vmi.metadata.namespace ?? 'default', vmi.metadata.name));
    o.pods.onChange((pod) => {
      const uid = pod.metadata?.labels?.[MIGRATION_JOB_LABEL];
      const own = uid && o.vmims.list().find((m) => m.metadata.uid === uid);
      if (own) this.enqueue(keyOfObject(own));
      else this.enqueueFor(pod.metadata?.namespace ?? 'default', pod.metadata?.labels?.[VMI_NAME_LABEL]);
    });
    // A node's readiness and address matter to the migrations targeting it; there are few unfinished ones.
    o.nodes.onChange(() => {
      for (const m of o.vmims.list()) if (isUnfinished(m)) this.enqueue(keyOfObject(m));
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncMigration(key);
  }

  protected ownedKeys(): string[] {
    return this.o.vmims.list().map(keyOfObject);
  }

  /** The unfinished migrations of a VMI, and any waiting for a slot (one ending frees one). */
  private enqueueFor(namespace: string, vmiName: string | undefined): void {
    for (const m of this.o.vmims.list()) {
      const mine = m.metadata.namespace === namespace && m.spec.vmiName === vmiName;
      if (isUnfinished(m) && (mine || m.status?.phase === 'Pending')) this.enqueue(keyOfObject(m));
    }
  }

  /** The migration's target pod: from the cache, else (the cache may lag its create) from the API server. */
  private async targetPodOf(vmim: VirtualMachineInstanceMigration, live: boolean): Promise<V1Pod | undefined> {
    const uid = vmim.metadata.uid!;
    const cached = this.o.pods.list().find((p) => p.metadata?.labels?.[MIGRATION_JOB_LABEL] === uid);
    if (cached || !live) return cached;
    const { items } = await this.o.clients.core.listNamespacedPod({
      namespace: vmim.metadata.namespace ?? 'default',
      labelSelector: `${MIGRATION_JOB_LABEL}=${uid}`,
    });
    return items[0];
  }

  private node(name: string | undefined): V1Node | undefined {
    return name ? this.o.nodes.get(name) : undefined;
  }

  private sourceNodeOf(m: VirtualMachineInstanceMigration): string | undefined {
    return (
      m.status?.migrationState?.sourceNode ??
      this.o.vmis.get(objectKey(m.metadata.namespace ?? 'default', m.spec.vmiName))?.status?.nodeName
    );
  }

  /** The settings that apply now: the flags, overridden by the best-matching MigrationPolicy. */
  private async settingsOf(vmim: VirtualMachineInstanceMigration, vmi: VirtualMachineInstance | undefined): Promise<Settings> {
    const { items } = await this.o.kubevirt.listMigrationPolicies().catch((err: unknown) => {
      // No MigrationPolicy CRD: no policy applies.
      if (isNotFound(err)) return { items: [] };
      throw err;
    });
    if (!items.length) return migrationSettings(this.o.defaults, undefined);
    const ns = await this.o.clients.core.readNamespace({ name: vmim.metadata.namespace ?? 'default' });
    return migrationSettings(this.o.defaults, matchPolicy(items, vmi?.metadata.labels ?? {}, ns.metadata?.labels ?? {}));
  }

  async syncMigration(key: string): Promise<void> {
    const vmim = this.o.vmims.get(key);
    if (!vmim || this.written.stale(key, vmim)) return;
    const namespace = vmim.metadata.namespace ?? 'default';
    const log = this.o.log.child({ migration: key, uid: vmim.metadata.uid });
    const m = migrationOf(vmim.status);
    const vmi = this.o.vmis.get(objectKey(namespace, vmim.spec.vmiName));
    const sourcePod = vmi && launcherPodOf(vmi, this.o.pods.list());
    const targetPod = await this.targetPodOf(vmim, !isFinal(m) && m.phase !== 'New' && m.phase !== 'Pending');
    const targetNode = this.node(targetPod?.spec?.nodeName);
    const uid = vmim.metadata.uid!;
    const now = this.now();
    const all = this.o.vmims.list();
    // An evacuation after failed ones waits, Pending, as KubeVirt's does (backoff.ts).
    const backoffMs = m.phase === 'Pending' ? evacuationBackoffMs(vmim, all, now) : 0;
    const observed: Observed = {
      now,
      deleting: Boolean(vmim.metadata.deletionTimestamp),
      ...(m.phase === 'New'
        ? {
            refusal: migrationRefusal(
              namespace,
              vmim.spec.vmiName,
              vmi,
              all.filter((x) => x.metadata.namespace === namespace),
              vmim,
            ),
          }
        : {}),
      ...(vmi
        ? { vmi: { final: ['Succeeded', 'Failed'].includes(vmi.status?.phase ?? ''), deleting: Boolean(vmi.metadata.deletionTimestamp) } }
        : {}),
      ...(sourcePod?.spec?.nodeName ? { sourcePod: { name: sourcePod.metadata!.name!, node: sourcePod.spec.nodeName } } : {}),
      ...(targetPod ? { targetPod: targetPodView(targetPod) } : {}),
      ...(targetNode ? { targetNode: nodeView(targetNode) } : {}),
      slotsFree:
        m.phase !== 'Pending' ||
        (backoffMs === 0 &&
          !slotRefusal({
            migration: vmim,
            sourceNode: vmi?.status?.nodeName,
            all,
            sourceNodeOf: (x) => this.sourceNodeOf(x),
            limits: this.o.defaults,
          })),
    };
    const source = sourceReport(sourcePod, uid);
    const target = targetReport(targetPod, uid);
    if (source) observed.source = source;
    if (target) observed.target = target;

    const decision = nextMigration(m, observed);
    for (const action of decision.actions) await this.act(action, vmim, vmi, targetPod, log);

    // Fixed at the handoff, where the migration state (and the VMI's copy) first records them.
    const recording = !['New', 'Pending', 'Scheduling', 'Scheduled', 'Failed'].includes(decision.next.phase);
    const settings = this.recordedSettings(vmim) ?? (recording ? await this.settingsOf(vmim, vmi) : undefined);
    const status = vmimStatusOf(decision.next, vmim.status, uid, settings, now);
    const patch = statusPatch(vmim.status, status, VMIM_STATUS_FIELDS);
    if (patch) {
      try {
        const rv = await this.o.kubevirt.patchStatus(VMIM_PLURAL, namespace, vmim.metadata.name!, vmim.metadata.resourceVersion, patch);
        this.written.record(key, rv);
        if (patch.phase) log.info({ from: m.phase, to: decision.next.phase }, 'migration phase changed');
      } catch (err) {
        if (!isConflict(err) && !isNotFound(err)) throw err;
        log.debug({ err }, 'VMIM changed while syncing; the next sync will see it');
        return;
      }
    }
    if (vmi && status.migrationState?.sourcePod) await this.copyToVmi(vmi, status.migrationState, log);
    if (decision.recheckAfterMs !== undefined) this.enqueueAfter(key, Math.max(decision.recheckAfterMs, backoffMs) + 100);
  }

  /** The settings recorded at the handoff. */
  private recordedSettings(vmim: VirtualMachineInstanceMigration): Settings | undefined {
    const s = vmim.status?.migrationState;
    return s?.migrationConfiguration
      ? { ...(s.migrationPolicyName ? { policyName: s.migrationPolicyName } : {}), configuration: s.migrationConfiguration }
      : undefined;
  }

  /**
   * The VMI's migrationState is a copy of the VMIM's from the handoff on:
   * what the node agents read. Another migration's copy is replaced only once
   * that migration ended.
   */
  private async copyToVmi(
    vmi: VirtualMachineInstance,
    state: NonNullable<VirtualMachineInstanceMigration['status']>['migrationState'],
    log: Logger,
  ): Promise<void> {
    const current = vmi.status?.migrationState;
    const othersRunning = current?.migrationUid && current.migrationUid !== state?.migrationUid && !current.completed && !current.failed;
    if (othersRunning) return;
    const patch = statusPatch(vmi.status, { ...vmi.status, migrationState: state, migrationTransport: 'Unix' }, [
      'migrationState',
      'migrationTransport',
    ]);
    if (!patch) return;
    // A new migration's copy replaces the last one's whole: its failed, abortRequested... must not linger.
    if (patch.migrationState) patch.migrationState = replacing(current, patch.migrationState);
    try {
      await this.o.kubevirt.patchStatus(
        VMI_PLURAL,
        vmi.metadata.namespace ?? 'default',
        vmi.metadata.name!,
        vmi.metadata.resourceVersion,
        patch,
      );
    } catch (err) {
      // The VMI's watch event syncs this migration again.
      if (!isConflict(err) && !isNotFound(err)) throw err;
      log.debug({ err }, 'VMI changed while copying the migration state; the next sync will see it');
    }
  }

  private async act(
    action: Action,
    vmim: VirtualMachineInstanceMigration,
    vmi: VirtualMachineInstance | undefined,
    targetPod: V1Pod | undefined,
    log: Logger,
  ): Promise<void> {
    const namespace = vmim.metadata.namespace ?? 'default';
    const name = vmim.metadata.name!;
    switch (action.kind) {
      case 'adopt':
      case 'releaseFinalizer': {
        const finalizers = vmim.metadata.finalizers ?? [];
        const has = finalizers.includes(MIGRATION_FINALIZER);
        const labelled = vmim.metadata.labels?.[VMIM_VMI_LABEL] === vmim.spec.vmiName;
        if (action.kind === 'adopt' && has && labelled) return;
        if (action.kind === 'releaseFinalizer' && !has) return;
        const next =
          action.kind === 'adopt'
            ? [...finalizers.filter((f) => f !== MIGRATION_FINALIZER), MIGRATION_FINALIZER]
            : finalizers.filter((f) => f !== MIGRATION_FINALIZER);
        const metadata = {
          resourceVersion: vmim.metadata.resourceVersion,
          finalizers: next,
          ...(action.kind === 'adopt' ? { labels: { [VMIM_VMI_LABEL]: vmim.spec.vmiName } } : {}),
        };
        return this.o.kubevirt.patch(VMIM_PLURAL, namespace, name, { metadata }).catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
      }
      case 'createTargetPod': {
        if (!vmi || (await this.targetPodOf(vmim, true))) return;
        const sourceNode = this.node(vmi.status?.nodeName);
        const pod = await this.o.clients.core.createNamespacedPod({ namespace, body: migrationTargetPod(vmi, vmim, sourceNode) });
        log.info({ pod: pod.metadata?.name }, 'created the migration target pod');
        this.o.events.recordFor(
          this.ref(vmim),
          'Normal',
          'SuccessfulCreate',
          `Created migration target pod ${namespace}/${pod.metadata?.name}`,
        );
        return;
      }
      case 'deleteTargetPod': {
        const pod = targetPod ?? (await this.targetPodOf(vmim, true));
        if (!pod || pod.metadata?.deletionTimestamp) return;
        await this.o.clients.core
          .deleteNamespacedPod({ namespace, name: pod.metadata!.name!, body: { preconditions: { uid: pod.metadata!.uid! } } })
          .catch((err: unknown) => {
            if (!isNotFound(err) && !isConflict(err)) throw err;
          });
        log.info({ pod: pod.metadata?.name }, 'deleted the migration target pod');
        return;
      }
      case 'grantTargetNode':
        if (vmi) await ensureTargetGrant(this.o.clients, vmi, action.node);
        return;
      case 'moveVmi':
        if (!vmi) return;
        await this.o.kubevirt.patchStatus(VMI_PLURAL, namespace, vmi.metadata.name!, undefined, {
          nodeName: action.node,
          ...(action.lost ? { phase: 'Failed', reason: 'NodeLost' } : {}),
        });
        return;
      case 'event':
        this.o.events.recordFor(this.ref(vmim), action.type, action.reason, action.message);
        if (vmi && action.type === 'Warning') this.o.events.recordFor(this.vmiRef(vmi), action.type, action.reason, action.message);
        return;
    }
  }

  private ref(vmim: VirtualMachineInstanceMigration) {
    return objectReference({ ...vmim, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstanceMigration' });
  }

  private vmiRef(vmi: VirtualMachineInstance) {
    return objectReference({ ...vmi, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance' });
  }
}
