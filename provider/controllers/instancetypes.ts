// The VM controller's instancetype step (KubeVirt's instancetype controller
// Sync): for a VM that names an instancetype or preference, store a
// ControllerRevision of it (once; the VM's status refs name it), read the
// revisions back and expand the VM's template. Namespaced kinds are looked up
// in the VM's own namespace only, so a tenant cannot reach another
// namespace's; cluster-scoped ones serve every VM, as in KubeVirt.
// Revisions are immutable by convention, so reads are cached.
import type { KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { apiMessage, isAlreadyExists, isNotFound } from '../kube/errors.js';
import { inferenceClaim, inferencePatch, inferredMatcher } from '../kubevirt/instancetype/infer.js';
import { expandTemplate, type Expanded, type Resolved } from '../kubevirt/instancetype/expand.js';
import {
  matcherKind,
  objectOfRevision,
  revisionFor,
  revisionNameOf,
  syncStatusRef,
  type ControllerRevision,
  type MatcherField,
} from '../kubevirt/instancetype/revision.js';
import {
  INSTANCETYPE_GROUP,
  INSTANCETYPE_KINDS,
  INSTANCETYPE_VERSION,
  type InstancetypeKind,
  type InstancetypeObject,
  type InstancetypeStatusRef,
  type VirtualMachine,
} from '../kubevirt/types.js';

/** What refuses a VM's instancetype or preference, naming the field; `retry` when a later try may succeed (a missing object). */
export class InstancetypeRefusal extends Error {
  readonly kind = 'InstancetypeRefusal';
  constructor(
    readonly field: string,
    message: string,
    readonly retry = false,
  ) {
    super(`${field}: ${message}`);
  }
}

/** The reads and writes the step needs (a fake in unit tests). */
export interface InstancetypeStore {
  /** Throws the API's 404 when absent. */
  getObject(kind: InstancetypeKind, namespace: string, name: string): Promise<InstancetypeObject>;
  getRevision(namespace: string, name: string): Promise<ControllerRevision>;
  createRevision(rev: ControllerRevision): Promise<void>;
  /** The labels of a claim in the namespace; throws the API's 404 when absent. */
  claimLabels(namespace: string, name: string): Promise<Record<string, string> | undefined>;
}

export function kubeInstancetypeStore(clients: KubeClients): InstancetypeStore {
  const group = { group: INSTANCETYPE_GROUP, version: INSTANCETYPE_VERSION };
  return {
    async getObject(kind, namespace, name) {
      const { plural, cluster } = INSTANCETYPE_KINDS[kind];
      const obj = cluster
        ? await clients.custom.getClusterCustomObject({ ...group, plural, name })
        : await clients.custom.getNamespacedCustomObject({ ...group, plural, namespace, name });
      return { ...(obj as InstancetypeObject), kind };
    },
    async getRevision(namespace, name) {
      const spec = { apiVersion: 'apps/v1', kind: 'ControllerRevision', metadata: { namespace, name } };
      return (await clients.objects.read(spec as KubernetesObject & { metadata: { name: string } })) as unknown as ControllerRevision;
    },
    async createRevision(rev) {
      await clients.objects.create(rev as unknown as KubernetesObject);
    },
    async claimLabels(namespace, name) {
      return (await clients.core.readNamespacedPersistentVolumeClaim({ namespace, name })).metadata?.labels;
    },
  };
}

export interface InstancetypeSync {
  /** The VM's status refs after the sync (only those of matchers it has). */
  refs: { instancetypeRef?: InstancetypeStatusRef; preferenceRef?: InstancetypeStatusRef };
  expanded: Expanded;
}

const MAX_CACHED = 2000;

export class Instancetypes {
  /** Revisions read, by namespace/name. */
  private readonly cache = new Map<string, ControllerRevision>();

  constructor(private readonly store: InstancetypeStore) {}

  /**
   * The merge patch of the VM's spec that records what its matchers infer from their volumes, or
   * undefined when none infers; throws InstancetypeRefusal when inference fails under policy Reject.
   */
  async inference(vm: VirtualMachine): Promise<Record<string, unknown> | undefined> {
    let patch: Record<string, unknown> | undefined;
    for (const field of ['instancetype', 'preference'] as const) {
      const found = inferenceClaim(vm, field);
      if (!found) continue;
      let result: Parameters<typeof inferencePatch>[2];
      if ('error' in found) result = found;
      else {
        try {
          result = inferredMatcher(field, await this.store.claimLabels(vm.metadata.namespace ?? 'default', found.claim));
        } catch (err) {
          if (!isNotFound(err)) throw err;
          throw new InstancetypeRefusal(`spec.${field}.inferFromVolume`, `PersistentVolumeClaim ${found.claim} not found`, true);
        }
      }
      const p = inferencePatch(vm, field, result);
      if ('error' in p) throw new InstancetypeRefusal(`spec.${field}.inferFromVolume`, String(p.error));
      patch = { ...(patch ?? {}), ...p };
    }
    return patch;
  }

  /** Stores what the VM's matchers name (where not stored yet) and expands its template; throws InstancetypeRefusal. */
  async sync(vm: VirtualMachine): Promise<InstancetypeSync> {
    const refs: InstancetypeSync['refs'] = {};
    const resolved: Resolved = {};
    for (const field of ['instancetype', 'preference'] as const) {
      const matcher = vm.spec[field];
      if (!matcher) continue;
      const refKey = field === 'instancetype' ? 'instancetypeRef' : 'preferenceRef';
      const ref = syncStatusRef(matcher, vm.status?.[refKey]);
      if (!ref.controllerRevisionRef?.name) ref.controllerRevisionRef = { name: await this.storeRevision(vm, field) };
      refs[refKey] = ref;
      const synced: VirtualMachine = { ...vm, status: { ...(vm.status ?? {}), [refKey]: ref } };
      const object = await this.readRevision(vm, field, revisionNameOf(synced, field)!);
      if (field === 'instancetype') resolved.instancetype = object as Resolved['instancetype'];
      else resolved.preference = object as Resolved['preference'];
    }
    return { refs, expanded: expandTemplate(vm, resolved) };
  }

  /**
   * The VM's template expanded without storing anything (virtctl expand): from its revisions where it
   * has them, else from the objects as they are now.
   */
  async expand(vm: VirtualMachine): Promise<Expanded> {
    const resolved: Resolved = {};
    for (const field of ['instancetype', 'preference'] as const) {
      if (!vm.spec[field]) continue;
      const name = revisionNameOf(vm, field);
      const object = name ? await this.readRevision(vm, field, name) : await this.readObject(vm, field);
      if (field === 'instancetype') resolved.instancetype = object as Resolved['instancetype'];
      else resolved.preference = object as Resolved['preference'];
    }
    return expandTemplate(vm, resolved);
  }

  /** The object a matcher names, as it is now, with its kind. */
  private async readObject(vm: VirtualMachine, field: MatcherField): Promise<InstancetypeObject & { kind: InstancetypeKind }> {
    const matcher = vm.spec[field]!;
    const kind = matcherKind(field, matcher.kind);
    if (!kind) throw new InstancetypeRefusal(`spec.${field}.kind`, `got unexpected kind in ${field} matcher: ${matcher.kind}`);
    if (!matcher.name) throw new InstancetypeRefusal(`spec.${field}.name`, `a ${field} matcher needs a name`);
    const namespace = vm.metadata.namespace ?? 'default';
    try {
      return { ...(await this.store.getObject(kind, namespace, matcher.name)), kind };
    } catch (err) {
      if (!isNotFound(err)) throw err;
      const scope = INSTANCETYPE_KINDS[kind].cluster ? '' : ` in namespace ${namespace}`;
      throw new InstancetypeRefusal(`spec.${field}`, `${kind} ${matcher.name} not found${scope}`, true);
    }
  }

  /** Stores a revision of the object the matcher names, as it is now; returns its name. */
  private async storeRevision(vm: VirtualMachine, field: MatcherField): Promise<string> {
    const object = await this.readObject(vm, field);
    const namespace = vm.metadata.namespace ?? 'default';
    const rev = revisionFor(vm, object);
    try {
      await this.store.createRevision(rev);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      // Stored by an earlier sync that crashed before writing the status: the same data, or someone else's.
      const existing = await this.store.getRevision(namespace, rev.metadata.name!);
      const held = objectOfRevision(existing, field);
      if (typeof held === 'string' || JSON.stringify(held.spec) !== JSON.stringify(object.spec))
        throw new InstancetypeRefusal(`spec.${field}`, `found existing ControllerRevision with unexpected data: ${rev.metadata.name}`);
    }
    return rev.metadata.name!;
  }

  private async readRevision(vm: VirtualMachine, field: MatcherField, name: string): Promise<InstancetypeObject> {
    const namespace = vm.metadata.namespace ?? 'default';
    const key = `${namespace}/${name}`;
    let rev = this.cache.get(key);
    if (!rev) {
      try {
        rev = await this.store.getRevision(namespace, name);
      } catch (err) {
        if (!isNotFound(err)) throw err;
        throw new InstancetypeRefusal(`spec.${field}.revisionName`, `ControllerRevision ${name} not found: ${apiMessage(err)}`, true);
      }
      if (this.cache.size >= MAX_CACHED) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(key, rev);
    }
    const object = objectOfRevision(rev, field);
    if (typeof object === 'string') throw new InstancetypeRefusal(`spec.${field}.revisionName`, `ControllerRevision ${name}: ${object}`);
    return object;
  }
}
