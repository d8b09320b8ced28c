// The claim a DataVolume needs, as CDI's controller renders it
// (renderPvcSpec, the import controller's annotations, the clone controller's
// dataSource), or why it gets none: a field vkvm refuses (named), or a clone
// source that is not there to copy yet. Pure; datavolume-controller.ts does the I/O.
//
// A clone from another namespace (CDI's cross-namespace clone): Kubernetes
// clones only within a namespace (a cross-namespace dataSourceRef is behind a
// feature gate), so the same CSI clone copies the source, in its namespace,
// into a staging claim, whose volume then moves to the DataVolume's claim
// (cross-namespace-clone.ts), as CDI rebinds its temporary claim's volume.
// Only a clone that passed admission (cloneAdmitted) is made.
//
// Sizes: the claim asks for exactly the DataVolume's size. CDI adds the
// filesystem's overhead (5.5% by default) to a Filesystem claim so that a
// disk.img of the requested size fits; vkvm's node side makes disk.img at the
// claim's capacity, so the guest sees the size asked for either way, and an
// overhead would only make the disk bigger than the manifest said.
import { controllerRefTo } from '../../kubevirt/controller-ref.js';
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1PersistentVolumeClaimSpec } from '@kubernetes/client-node';
import {
  IMPORT_ENDPOINT_ANNOTATION,
  IMPORT_SECRET_ANNOTATION,
  IMPORT_SOURCE_ANNOTATION,
  REGISTRY_ENDPOINT_PREFIX,
  type ImportSource,
} from '../../kubevirt/datavolume-annotations.js';
import { CDI_API_VERSION, type DataVolume } from '../../kubevirt/datavolume-types.js';

/** Where the scheduler's (here: the source's) node is named for a WaitForFirstConsumer claim. */
export const SELECTED_NODE_ANNOTATION = 'volume.kubernetes.io/selected-node';
/** The topology key vkvm's CSI driver puts on every volume (provider/csi/): a volume lives on one node. */
export const NODE_TOPOLOGY_KEY = 'topology.vkvm.io/node';

export type SourceKind = 'blank' | 'http' | 'registry' | 'pvc';

/** A field vkvm does not realize, named by its path. */
export interface Refusal {
  field: string;
  message: string;
}

export type ClaimPlan =
  /** `staging`: for a clone from another namespace, the claim there that the CSI clone fills first. */
  | { kind: 'claim'; claim: V1PersistentVolumeClaim; staging?: V1PersistentVolumeClaim }
  | { kind: 'refused'; refusal: Refusal }
  /** A clone whose source claim is missing or not bound yet: CDI's reason and message. */
  | { kind: 'waitForSource'; reason: 'CloneSourceNotFound' | 'CloneSourceNotBound'; message: string };

export interface ClaimInput {
  dv: DataVolume;
  /** The clone source (spec.source.pvc, in its namespace), if the cache has it. */
  source?: V1PersistentVolumeClaim;
  /** The PersistentVolume the clone source is bound to. */
  sourcePv?: V1PersistentVolume;
  /** For a clone from another namespace: whether it passed the clone-source admission (clone-admission.ts). */
  cloneAdmitted?: boolean;
}

/** On a staging claim: the DataVolume (namespace/name) it is a clone for. */
export const CLONE_FOR_ANNOTATION = 'vkvm.io/clone-for';

/** The staging claim of a cross-namespace clone, in the source's namespace: one per DataVolume. */
export const stagingClaimName = (dv: DataVolume): string => `vkvm-clone-${dv.metadata.uid}`;

/** The namespace a pvc source is in: its own, or the DataVolume's. */
export const cloneSourceNamespace = (dv: DataVolume): string => dv.spec.source?.pvc?.namespace || (dv.metadata.namespace ?? 'default');

/** Whether the DataVolume clones a claim of another namespace. */
export const clonesFromAnotherNamespace = (dv: DataVolume): boolean =>
  dv.spec.source?.pvc !== undefined && cloneSourceNamespace(dv) !== (dv.metadata.namespace ?? 'default');

export function sourceKind(dv: DataVolume): SourceKind | undefined {
  const s = dv.spec.source ?? {};
  const kinds = (['blank', 'http', 'registry', 'pvc'] as const).filter((k) => s[k] !== undefined);
  return kinds.length === 1 ? kinds[0] : undefined;
}

/** The node a PersistentVolume's affinity pins it to (vkvm's CSI volumes: exactly one). */
export function nodeOfVolume(pv: V1PersistentVolume | undefined): string | undefined {
  for (const term of pv?.spec?.nodeAffinity?.required?.nodeSelectorTerms ?? []) {
    for (const e of term.matchExpressions ?? []) {
      if (e.key === NODE_TOPOLOGY_KEY && e.operator === 'In' && e.values?.length === 1) return e.values[0];
    }
  }
  return undefined;
}

function sourceAnnotations(dv: DataVolume): Record<string, string> | Refusal {
  const s = dv.spec.source;
  const annotate = (source: ImportSource, endpoint?: string, secret?: string): Record<string, string> => ({
    [IMPORT_SOURCE_ANNOTATION]: source,
    ...(endpoint ? { [IMPORT_ENDPOINT_ANNOTATION]: endpoint } : {}),
    ...(secret ? { [IMPORT_SECRET_ANNOTATION]: secret } : {}),
  });
  if (s.http) {
    if (!/^https?:\/\//.test(s.http.url)) return { field: 'spec.source.http.url', message: 'an http:// or https:// URL is required' };
    return annotate('http', s.http.url, s.http.secretRef);
  }
  if (s.registry) {
    const url = s.registry.url;
    if (!url.startsWith(REGISTRY_ENDPOINT_PREFIX) || url.length === REGISTRY_ENDPOINT_PREFIX.length)
      return { field: 'spec.source.registry.url', message: `the image as ${REGISTRY_ENDPOINT_PREFIX}host/repository:tag is required` };
    return annotate('registry', url, s.registry.secretRef);
  }
  if (s.blank) return annotate('none');
  return {};
}

const sizeOf = (pvc: V1PersistentVolumeClaim | undefined): string | undefined =>
  pvc?.status?.capacity?.storage ?? pvc?.spec?.resources?.requests?.storage;

/** The claim's spec from spec.pvc (as it is) or spec.storage (with CDI's defaults, and a clone's from its source). */
function claimSpec(dv: DataVolume, source: V1PersistentVolumeClaim | undefined): V1PersistentVolumeClaimSpec {
  if (dv.spec.pvc) return structuredClone(dv.spec.pvc) as V1PersistentVolumeClaimSpec;
  const storage = dv.spec.storage ?? {};
  const size = storage.resources?.requests?.storage ?? sizeOf(source);
  // A clone is made by the source's driver: same class and mode unless the DataVolume names them.
  const storageClassName = storage.storageClassName ?? source?.spec?.storageClassName;
  return {
    accessModes: storage.accessModes?.length ? [...storage.accessModes] : ['ReadWriteOnce'],
    volumeMode: storage.volumeMode ?? source?.spec?.volumeMode ?? 'Filesystem',
    resources: { requests: size !== undefined ? { storage: String(size) } : {} },
    ...(storageClassName ? { storageClassName } : {}),
  };
}

/** The DataVolume's claim: same name and namespace, controlled by it. */
export function planClaim({ dv, source, sourcePv, cloneAdmitted }: ClaimInput): ClaimPlan {
  const namespace = dv.metadata.namespace ?? 'default';
  const kind = sourceKind(dv);
  if (!kind)
    return { kind: 'refused', refusal: { field: 'spec.source', message: 'exactly one of blank, http, registry and pvc is required' } };
  const annotations = sourceAnnotations(dv);
  if ('field' in annotations) return { kind: 'refused', refusal: annotations as Refusal };
  const fromNamespace = cloneSourceNamespace(dv);
  const crossNamespace = clonesFromAnotherNamespace(dv);
  let selectedNode: string | undefined;
  if (kind === 'pvc') {
    if (crossNamespace && !cloneAdmitted) return { kind: 'refused', refusal: NOT_ADMITTED };
    const at = `${fromNamespace}/${dv.spec.source.pvc!.name}`;
    if (!source || source.metadata?.deletionTimestamp)
      return { kind: 'waitForSource', reason: 'CloneSourceNotFound', message: `clone source claim ${at} not found` };
    if (source.status?.phase !== 'Bound')
      return { kind: 'waitForSource', reason: 'CloneSourceNotBound', message: `clone source claim ${at} is not bound yet` };
    // A node-local volume is copied where it lives: the clone is provisioned on that node.
    selectedNode = nodeOfVolume(sourcePv);
  }
  const spec = claimSpec(dv, source);
  const placed: Record<string, string> = selectedNode ? { [SELECTED_NODE_ANNOTATION]: selectedNode } : {};
  const cloned = (): V1PersistentVolumeClaimSpec => ({
    ...spec,
    dataSource: { kind: 'PersistentVolumeClaim', name: dv.spec.source.pvc!.name },
  });
  const labels = { ...(dv.metadata.labels ?? {}), 'app.kubernetes.io/managed-by': 'vkvm' };
  if (!crossNamespace)
    return { kind: 'claim', claim: ownClaim(dv, labels, { ...annotations, ...placed }, kind === 'pvc' ? cloned() : spec) };
  return {
    kind: 'claim',
    // Bound to the staging claim's volume once it is filled: neither placed nor cloned itself.
    claim: ownClaim(dv, labels, annotations, spec),
    staging: {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: {
        name: stagingClaimName(dv),
        namespace: fromNamespace,
        labels: { 'app.kubernetes.io/managed-by': 'vkvm' },
        annotations: { ...placed, [CLONE_FOR_ANNOTATION]: `${namespace}/${dv.metadata.name}` },
      },
      spec: cloned(),
    },
  };
}

const NOT_ADMITTED: Refusal = {
  field: 'spec.source.pvc.namespace',
  message:
    'a clone from another namespace is made only for a DataVolume (and its VirtualMachine) created while the clone-source ' +
    'admission policy was in force; create it again',
};

function ownClaim(
  dv: DataVolume,
  labels: Record<string, string>,
  annotations: Record<string, string>,
  spec: V1PersistentVolumeClaimSpec,
): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: dv.metadata.name!,
      namespace: dv.metadata.namespace ?? 'default',
      labels,
      annotations,
      ownerReferences: [controllerRefTo(dv, CDI_API_VERSION, 'DataVolume')],
    },
    spec,
  };
}
