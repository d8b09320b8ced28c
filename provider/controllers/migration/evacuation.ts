// What the evacuation controller does for one VMI that an eviction marked
// (status.evacuationNodeName, set by the eviction webhook): migrate it off that
// node, or cancel the evacuation when the node was uncordoned before the
// migration started (kubevirt#5177), or clear the mark once the VMI left the
// node. The first row that applies wins. Pure.
//
// A drain cordons the node before it evicts, so an evacuation migration
// created while the node was cordoned is noted so (EVACUATION_CORDONED); only
// those are canceled by an uncordon. An eviction of a pod on a schedulable
// node (no drain) still migrates the VM.
import { findCondition } from '../../kubevirt/conditions.js';
import type { EvictionStrategy, VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { isUnfinished, LIVE_MIGRATABLE } from './admission.js';
import { isEvacuation } from './backoff.js';

/** On an evacuation VMIM made while its node was cordoned: an uncordon cancels it until it starts. */
export const EVACUATION_CORDONED = 'vkvm.io/evacuation-node-cordoned';

/** A migration not yet past Scheduling: no target prepared, nothing copied; canceling it costs nothing. */
const NOT_STARTED: ReadonlySet<string> = new Set(['', 'Pending', 'Scheduling']);

export type EvacuationStep =
  | { kind: 'none'; why: string }
  /** Create an evacuation VMIM, noting whether the node is cordoned now. */
  | { kind: 'migrate'; node: string; cordoned: boolean }
  /** Delete these not-yet-started evacuation VMIMs and clear evacuationNodeName. */
  | { kind: 'cancel'; deleteVmims: string[] }
  /** The VMI is no longer on the node it was to leave: clear evacuationNodeName. */
  | { kind: 'clear' };

export interface EvacuationView {
  vmi: VirtualMachineInstance;
  /** The strategy that applies (the VMI's, else the cluster's). */
  strategy: EvictionStrategy;
  /** The evacuation node's spec.unschedulable; undefined when the node is gone. */
  nodeCordoned: boolean | undefined;
  /** The VMIMs of this VMI. */
  migrations: readonly VirtualMachineInstanceMigration[];
  /** The VMI's launcher pods that have not ended (a finished migration's target may still be going). */
  activePods: number;
}

const createdMs = (m: VirtualMachineInstanceMigration) => new Date(m.metadata.creationTimestamp ?? 0).getTime();

export function nextEvacuationStep(v: EvacuationView): EvacuationStep {
  const node = v.vmi.status?.evacuationNodeName;
  if (!node) return { kind: 'none', why: 'not marked for evacuation' };
  const phase = v.vmi.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed' || v.vmi.metadata.deletionTimestamp) return { kind: 'none', why: 'the VMI is ending' };
  if (v.vmi.status?.nodeName !== node) return { kind: 'clear' };

  const evacuations = v.migrations.filter(isEvacuation).sort((a, b) => createdMs(b) - createdMs(a));
  const newest = evacuations[0];
  if (v.nodeCordoned === false && newest?.metadata.annotations?.[EVACUATION_CORDONED] === 'true') {
    const unfinished = evacuations.filter(isUnfinished);
    if (unfinished.some((m) => !NOT_STARTED.has(m.status?.phase ?? '')))
      return { kind: 'none', why: 'the node was uncordoned, but the migration has started: it finishes' };
    return { kind: 'cancel', deleteVmims: unfinished.filter((m) => !m.metadata.deletionTimestamp).map((m) => m.metadata.name!) };
  }

  if (v.strategy !== 'LiveMigrate' && v.strategy !== 'LiveMigrateIfPossible')
    return { kind: 'none', why: `evictionStrategy ${v.strategy}: vkvm does not migrate it` };
  if (phase !== 'Running') return { kind: 'none', why: `the VMI is ${phase ?? 'not running'}` };
  if (v.migrations.some(isUnfinished)) return { kind: 'none', why: 'a migration of the VMI is in flight' };
  if (findCondition(v.vmi.status?.conditions, LIVE_MIGRATABLE)?.status !== 'True')
    return { kind: 'none', why: 'the VMI is not live-migratable' };
  if (v.activePods > 1) return { kind: 'none', why: "an earlier migration's pods are still going" };
  return { kind: 'migrate', node, cordoned: v.nodeCordoned === true };
}
