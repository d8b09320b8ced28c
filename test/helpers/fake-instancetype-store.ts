// An in-memory InstancetypeStore (provider/controllers/instancetypes.ts) for
// unit tests: objects by kind/namespace/name, revisions by namespace/name,
// claims' labels; absent ones fail with the API's 404.
import type { InstancetypeStore } from '../../provider/controllers/instancetypes.js';
import type { ControllerRevision } from '../../provider/kubevirt/instancetype/revision.js';
import type { InstancetypeKind, InstancetypeObject } from '../../provider/kubevirt/types.js';

const notFound = (what: string) => Object.assign(new Error(`${what} not found`), { code: 404 });

export class FakeInstancetypeStore implements InstancetypeStore {
  readonly objects = new Map<string, InstancetypeObject>();
  readonly revisions = new Map<string, ControllerRevision>();
  readonly claims = new Map<string, Record<string, string>>();
  private uid = 0;

  /** Adds (or replaces, with a new generation) an object; namespace '' for the cluster-scoped kinds. */
  put(kind: InstancetypeKind, namespace: string, name: string, spec: InstancetypeObject['spec']): void {
    const key = `${kind}/${namespace}/${name}`;
    const old = this.objects.get(key);
    const generation = (old?.metadata.generation ?? 0) + 1;
    const uid = old?.metadata.uid ?? `uid-${++this.uid}`;
    this.objects.set(key, { kind, metadata: { name, ...(namespace ? { namespace } : {}), uid, generation }, spec });
  }

  async getObject(kind: InstancetypeKind, namespace: string, name: string): Promise<InstancetypeObject> {
    const cluster = kind.includes('Cluster');
    const found = this.objects.get(`${kind}/${cluster ? '' : namespace}/${name}`);
    if (!found) throw notFound(`${kind} ${name}`);
    return structuredClone(found);
  }

  async getRevision(namespace: string, name: string): Promise<ControllerRevision> {
    const found = this.revisions.get(`${namespace}/${name}`);
    if (!found) throw notFound(`ControllerRevision ${name}`);
    return structuredClone(found);
  }

  async createRevision(rev: ControllerRevision): Promise<void> {
    const key = `${rev.metadata.namespace}/${rev.metadata.name}`;
    if (this.revisions.has(key)) throw Object.assign(new Error('exists'), { code: 409 });
    this.revisions.set(key, structuredClone(rev));
  }

  async claimLabels(namespace: string, name: string): Promise<Record<string, string> | undefined> {
    const found = this.claims.get(`${namespace}/${name}`);
    if (!found) throw notFound(`PersistentVolumeClaim ${name}`);
    return found;
  }
}
