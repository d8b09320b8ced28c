// inferFromVolume, as KubeVirt's VM mutating webhook does it
// (pkg/instancetype/infer): a matcher that names a volume instead of an
// instancetype takes the name and kind from the labels of that volume's
// PersistentVolumeClaim. vkvm has no mutating webhook: the VM controller
// writes the result into the VM's spec before anything else. Of KubeVirt's
// sources vkvm serves PVC and DataVolume volumes (no DataSources). Pure.
import type { VirtualMachine } from '../types.js';
import type { MatcherField } from './revision.js';
import { volumeClaimName } from '../volume-claim.js';

const LABELS: Record<MatcherField, [name: string, kind: string]> = {
  instancetype: ['instancetype.kubevirt.io/default-instancetype', 'instancetype.kubevirt.io/default-instancetype-kind'],
  preference: ['instancetype.kubevirt.io/default-preference', 'instancetype.kubevirt.io/default-preference-kind'],
};

/** The claim a matcher infers from, or an error when its volume is missing or of another kind; undefined when it infers nothing. */
export function inferenceClaim(
  vm: VirtualMachine,
  field: MatcherField,
): { claim: string } | { error: string; ignorable: boolean } | undefined {
  const volumeName = vm.spec[field]?.inferFromVolume;
  if (!volumeName) return undefined;
  const volume = (vm.spec.template.spec.volumes ?? []).find((v) => v.name === volumeName);
  if (!volume) return { error: `unable to find volume ${volumeName} to infer defaults`, ignorable: false };
  // A DataVolume's claim carries the DataVolume's labels (provider/controllers/datavolumes/claim-plan.ts).
  const claim = volumeClaimName(volume);
  if (claim) return { claim };
  return { error: `unable to infer defaults from volume ${volumeName} as type is not supported`, ignorable: true };
}

/** The labels' answer: the matcher to write, or an error (ignorable: the failure policy may drop the matcher). */
export function inferredMatcher(
  field: MatcherField,
  labels: Record<string, string> | undefined,
): { name: string; kind?: string } | { error: string; ignorable: true } {
  const [nameLabel, kindLabel] = LABELS[field];
  const name = labels?.[nameLabel];
  if (!name) return { error: `unable to find required ${nameLabel} label on the volume`, ignorable: true };
  const kind = labels?.[kindLabel];
  return { name, ...(kind ? { kind } : {}) };
}

/**
 * The merge patch of the VM's spec that records an inference: the inferred matcher (its inferFromVolume
 * dropped), or no matcher when the error is ignorable and the policy is Ignore. With Ignore, KubeVirt
 * also drops the template's memory, which stood in for a failed inference.
 */
export function inferencePatch(
  vm: VirtualMachine,
  field: MatcherField,
  result: { name: string; kind?: string } | { error: string; ignorable: boolean },
): Record<string, unknown> | { error: string } {
  const ignore = vm.spec[field]?.inferFromVolumeFailurePolicy === 'Ignore';
  if ('error' in result) return result.ignorable && ignore ? { [field]: null } : { error: result.error };
  const matcher = {
    name: result.name,
    kind: result.kind ?? null,
    inferFromVolume: null,
    inferFromVolumeFailurePolicy: null,
    revisionName: null,
  };
  const dropMemory = field === 'instancetype' && ignore ? { template: { spec: { domain: { memory: null } } } } : {};
  return { [field]: matcher, ...dropMemory };
}
