// The ControllerRevisions that pin a VM to the instancetype and preference it
// first used, as KubeVirt keeps them (pkg/instancetype/revision): the VM's
// status.instancetypeRef (and preferenceRef) names the revision; it is kept
// until the matcher's name, kind or inferFromVolume changes, so a later edit
// of the instancetype changes neither the running VMI nor the next start.
// `spec.instancetype.revisionName` names a revision to use instead. Pure.
import { controllerRefTo } from '../controller-ref.js';
import {
  INSTANCETYPE_API_VERSION,
  INSTANCETYPE_GROUP,
  INSTANCETYPE_KINDS,
  INSTANCETYPE_VERSION,
  KUBEVIRT_API_VERSION,
  type InstancetypeKind,
  type InstancetypeMatcher,
  type InstancetypeObject,
  type InstancetypeStatusRef,
  type ObjectMeta,
  type VirtualMachine,
} from '../types.js';

export type MatcherField = 'instancetype' | 'preference';

/** The kind an empty matcher kind means: the cluster-scoped one (KubeVirt's find/spec.go). */
export const DEFAULT_KIND: Record<MatcherField, InstancetypeKind> = {
  instancetype: 'VirtualMachineClusterInstancetype',
  preference: 'VirtualMachineClusterPreference',
};

/** The kind a matcher names, by kind, singular or plural in any case; undefined when it names none of its field's kinds. */
export function matcherKind(field: MatcherField, kind: string | undefined): InstancetypeKind | undefined {
  if (!kind) return DEFAULT_KIND[field];
  const k = kind.toLowerCase();
  const found = (Object.keys(INSTANCETYPE_KINDS) as InstancetypeKind[]).find(
    (name) => name.toLowerCase() === k || INSTANCETYPE_KINDS[name].plural === k,
  );
  const ofField = field === 'instancetype' ? !found?.endsWith('Preference') : found?.endsWith('Preference');
  return found && ofField ? found : undefined;
}

/**
 * The status reference after syncing it with the matcher (KubeVirt's syncStatusWithMatcher): a new name,
 * kind or inferFromVolume drops the revision; a revisionName sets it. `controllerRevisionRef` absent
 * means a revision of the object as it is now must be stored.
 */
export function syncStatusRef(matcher: InstancetypeMatcher, current: InstancetypeStatusRef | undefined): InstancetypeStatusRef {
  const ref: InstancetypeStatusRef = structuredClone(current ?? {});
  let changed = false;
  for (const key of ['name', 'kind', 'inferFromVolume'] as const) {
    const value = matcher[key];
    if (value && value !== ref[key]) {
      ref[key] = value;
      changed = true;
    }
  }
  if (changed) delete ref.controllerRevisionRef;
  if (matcher.inferFromVolumeFailurePolicy) ref.inferFromVolumeFailurePolicy = matcher.inferFromVolumeFailurePolicy;
  if (matcher.revisionName && ref.controllerRevisionRef?.name !== matcher.revisionName)
    ref.controllerRevisionRef = { name: matcher.revisionName };
  return ref;
}

/** The revision a VM's VMIs are made from: the matcher's revisionName first (KubeVirt avoids a race with the store so). */
export function revisionNameOf(vm: VirtualMachine, field: MatcherField): string | undefined {
  const ref = field === 'instancetype' ? vm.status?.instancetypeRef : vm.status?.preferenceRef;
  return vm.spec[field]?.revisionName || ref?.controllerRevisionRef?.name || undefined;
}

export interface ControllerRevision {
  apiVersion: 'apps/v1';
  kind: 'ControllerRevision';
  metadata: ObjectMeta;
  data: unknown;
  revision: number;
}

/** KubeVirt's GenerateName: `<vm>-<object>-<version>-<uid>-<generation>`. */
export function revisionName(vmName: string, object: InstancetypeObject): string {
  return `${vmName}-${object.metadata.name}-${INSTANCETYPE_VERSION}-${object.metadata.uid}-${object.metadata.generation ?? 0}`;
}

/** The revision storing `object` for the VM: the object without its labels, annotations and owners, controlled by the VM. */
export function revisionFor(vm: VirtualMachine, object: InstancetypeObject & { kind: InstancetypeKind }): ControllerRevision {
  const { name, uid, generation } = object.metadata;
  return {
    apiVersion: 'apps/v1',
    kind: 'ControllerRevision',
    metadata: {
      name: revisionName(vm.metadata.name!, object),
      namespace: vm.metadata.namespace ?? 'default',
      ownerReferences: [controllerRefTo(vm, KUBEVIRT_API_VERSION, 'VirtualMachine')],
      labels: {
        'instancetype.kubevirt.io/object-generation': String(generation ?? 0),
        'instancetype.kubevirt.io/object-kind': object.kind,
        'instancetype.kubevirt.io/object-name': name!,
        'instancetype.kubevirt.io/object-uid': uid!,
        'instancetype.kubevirt.io/object-version': INSTANCETYPE_VERSION,
      },
    },
    data: {
      apiVersion: INSTANCETYPE_API_VERSION,
      kind: object.kind,
      metadata: {
        name,
        ...(object.metadata.namespace ? { namespace: object.metadata.namespace } : {}),
        uid,
        generation,
        resourceVersion: object.metadata.resourceVersion,
        creationTimestamp: object.metadata.creationTimestamp,
      },
      spec: object.spec,
    },
    revision: 0,
  };
}

/** The instancetype or preference a revision holds, or an error message when it holds none of `field`'s kinds. */
export function objectOfRevision(rev: { data?: unknown }, field: MatcherField): InstancetypeObject | string {
  const data = rev.data as Partial<InstancetypeObject> | undefined;
  const group = typeof data?.apiVersion === 'string' ? data.apiVersion.split('/')[0] : undefined;
  if (!data || group !== INSTANCETYPE_GROUP || !data.spec || !data.metadata || matcherKind(field, data.kind) === undefined || !data.kind)
    return `it holds no ${field} of ${INSTANCETYPE_GROUP}`;
  return data as InstancetypeObject;
}
