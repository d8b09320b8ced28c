// Where the pod controller meets live migration: a migration's target pod is
// synced as an incoming VM (migration/target.ts), never booted; a VMI's
// running pod moves its outgoing migration on (migration/source.ts) before
// the controller looks at its launcher, so a VM that migrated away keeps its
// launcher until its address is handed over, then ends as Migrated.
import type { V1Pod } from '@kubernetes/client-node';
import type { Launchers } from '../launchers/registry.js';
import type { MigrationSource } from '../migration/source.js';
import type { Learnt, MigrationTarget } from '../migration/target.js';
import type { LifecycleEvent, PodLifecycle } from './lifecycle.js';
import { keyOfObject } from '../kube/informer.js';
import { committedTo, incomingRecheckMs, nextIncomingStep, type IncomingLauncher, type IncomingStep } from './incoming-step.js';
import { migrationJobOf } from './migration-target.js';
import { observeVm } from './observe.js';
import { vmiOwner, type VmiSource } from './vmi-source.js';

export interface PodMigrationsOptions {
  target: Pick<MigrationTarget, 'prepare' | 'finish' | 'cancel' | 'forget'>;
  source: Pick<MigrationSource, 'sync' | 'forget'>;
  launchers: Pick<Launchers<unknown>, 'get'>;
  vmis: Pick<VmiSource, 'read'>;
  lifecycle(uid: string): PodLifecycle | undefined;
  apply(pod: V1Pod, event: LifecycleEvent): PodLifecycle | undefined;
  learnt: Learnt;
  /** Syncs the pod's key again after a delay (the pod controller's queue). */
  syncAfter(key: string, delayMs: number): void;
}

export class PodMigrations {
  constructor(private readonly o: PodMigrationsOptions) {}

  /**
   * Whether the pod is a migration target whose VM has not arrived (then sync it here, never as a VM to boot);
   * once arrived (Running, or its launcher found resumed after an agent restart) it is the VMI's pod like any.
   */
  receiving(pod: V1Pod): boolean {
    if (!migrationJobOf(pod)) return false;
    const uid = pod.metadata!.uid!;
    const state = this.o.lifecycle(uid)?.state.kind;
    const view = this.o.launchers.get(uid);
    const resumed = view?.live === true && (view.state as { migration?: { phase?: string } }).migration?.phase === 'Resumed';
    // Incoming until this sync sees the VM arrived; a target that failed (Invalid, Finished) stays here too: it
    // must never fall through to a boot. A resumed launcher found after an agent restart is adopted as any VM's.
    if (state === 'Incoming') return true;
    return state !== 'Running' && !resumed;
  }

  /**
   * One sync of a receiving target pod: prepare it, resume the VM once the source committed, or end it, as
   * incoming-step.ts decides from what it reads now; while the pod still receives, it syncs again after a
   * bounded delay, so a lost VMI event or control-stream commit cannot strand it.
   */
  async syncIncoming(pod: V1Pod): Promise<void> {
    const step = await this.stepIncoming(pod, pod.metadata!.uid!, migrationJobOf(pod)!);
    const recheckMs = step && incomingRecheckMs(step);
    if (recheckMs !== undefined) this.o.syncAfter(keyOfObject(pod), recheckMs);
  }

  /** The step taken; undefined when the pod no longer receives (invalid, or its VMI gone). */
  private async stepIncoming(pod: V1Pod, uid: string, job: string): Promise<IncomingStep | undefined> {
    const view = this.o.launchers.get(uid);
    const migration = view?.live ? (view.state as { migration?: { uid: string; phase: string } }).migration : undefined;
    const launcher: IncomingLauncher = !view
      ? 'none'
      : !view.live
        ? 'gone'
        : migration?.uid === job && migration.phase === 'Resumed'
          ? 'resumed'
          : 'waiting';
    if (launcher === 'gone') {
      this.o.apply(pod, { type: 'stopSeen' });
      const lc = this.o.lifecycle(uid);
      if (lc && view) this.o.apply(pod, { type: 'ended', vm: observeVm(view, lc.history), restartPolicy: 'Never' });
      return { kind: 'end' };
    }
    const lc = this.o.apply(pod, { type: 'incoming', migrationUid: job });
    if (lc?.state.kind !== 'Incoming') return undefined;
    // The commit, as the controllers copied it into the VMI, read from the API: the stream's commit may have been lost.
    const committed = committedTo((await this.o.vmis.read(pod))?.status?.migrationState, job, pod.metadata?.name);
    let step = nextIncomingStep({ launcher, prepared: lc.state.prepared, committed });
    if (step.kind === 'prepare') {
      const outcome = await this.o.target.prepare(pod, job, this.o.learnt);
      if (outcome.type === 'invalid') return void this.o.apply(pod, { type: 'invalid', message: outcome.message, found: 'start' });
      if (outcome.type === 'gone') return undefined;
      this.o.apply(pod, { type: 'incomingPrepared' });
      step = nextIncomingStep({ launcher: 'waiting', prepared: true, committed });
    }
    if (step.kind === 'arrived') this.o.apply(pod, { type: 'resumed' });
    if (step.kind === 'resume') await this.o.target.finish(uid, job);
    return step;
  }

  /** One sync of a VMI's pod that is not receiving: its outgoing migration, if any, one step on. */
  async syncOutgoing(pod: V1Pod): Promise<void> {
    // A former target whose VM arrived (it keeps its label) is the VMI's pod now, and may be a source in turn.
    if (!vmiOwner(pod)) return;
    const uid = pod.metadata!.uid!;
    const view = this.o.launchers.get(uid);
    // Only a pod with a launcher (running, or gone after its VM migrated) can be a source.
    if (!view) return;
    await this.o.source.sync(pod, await this.o.vmis.read(pod));
  }

  /** Before the pod's VM is removed. */
  async remove(uid: string): Promise<void> {
    await this.o.target.cancel(uid);
    this.o.target.forget(uid);
    this.o.source.forget(uid);
  }
}
