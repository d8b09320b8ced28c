// What an e2e wait watches: a list-then-watch of one kind of object, narrowed
// to one name or by selectors, with how to turn its raw JSON into the client's
// types and how to show an object in a timeout's message.
import type { DataVolume } from '../../../provider/kubevirt/datavolume-types.js';
import {
  AppsV1Api,
  type CoreV1Event,
  type KubernetesListObject,
  type KubernetesObject,
  type V1CertificateSigningRequest,
  type V1DaemonSet,
  type V1Lease,
  type V1Node,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1ServiceAccount,
} from '@kubernetes/client-node';
// Not re-exported by the package root; a watch delivers raw JSON, a typed list Dates and typed fields.
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import type { KubeClients } from '../../../provider/kube/client.js';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../../provider/kubevirt/types.js';
import type { VirtualMachineInstanceReplicaSet, VirtualMachinePool } from '../../../provider/kubevirt/replica-types.js';

/** An object as raw JSON, as the API sends it (the type's Dates are strings there). */
export type RawObject = KubernetesObject;

export interface Watched<T> {
  /** For messages: "pods in e2e-pods named vm1". */
  describe: string;
  clients: KubeClients;
  /** The watch path, e.g. /api/v1/namespaces/e2e-pods/pods. */
  path: string;
  fieldSelector?: string;
  labelSelector?: string;
  /** Lists the same objects as the watch, as raw JSON (with the list's resourceVersion). */
  listRaw(): Promise<KubernetesListObject<RawObject>>;
  /** Raw JSON → what a typed read returns. */
  fromRaw(raw: RawObject): T;
  /** What a timeout's message shows of one object. */
  summarize(obj: T): unknown;
}

/** Narrows a watch: one object by name, and/or selectors. */
export interface Selection {
  name?: string;
  labelSelector?: string;
  fieldSelector?: string;
}

const selectors = (sel: Selection) => {
  const fields = [sel.name !== undefined ? `metadata.name=${sel.name}` : undefined, sel.fieldSelector].filter(Boolean).join(',');
  return { ...(fields ? { fieldSelector: fields } : {}), ...(sel.labelSelector ? { labelSelector: sel.labelSelector } : {}) };
};

const describeOf = (what: string, namespace: string | undefined, sel: Selection) =>
  [
    what,
    namespace ? `in ${namespace}` : '',
    sel.name !== undefined ? `named ${sel.name}` : '',
    sel.labelSelector ? `with labels ${sel.labelSelector}` : '',
    sel.fieldSelector ? `with fields ${sel.fieldSelector}` : '',
  ]
    .filter(Boolean)
    .join(' ');

/** Name, deletion and status: what tells one state from another. */
const statusSummary = (o: { metadata?: { name?: string; deletionTimestamp?: unknown }; status?: unknown }) => ({
  name: o.metadata?.name,
  ...(o.metadata?.deletionTimestamp ? { deletionTimestamp: o.metadata.deletionTimestamp } : {}),
  status: o.status,
});

/** A typed core kind: listed with the typed client, then turned back to raw JSON so the cache holds one form. */
function typed<T extends object>(o: {
  what: string;
  type: string;
  clients: KubeClients;
  path: string;
  namespace?: string;
  sel: Selection;
  list: (s: { fieldSelector?: string; labelSelector?: string }) => Promise<KubernetesListObject<T & KubernetesObject>>;
  summarize?: (obj: T) => unknown;
}): Watched<T> {
  const s = selectors(o.sel);
  return {
    describe: describeOf(o.what, o.namespace, o.sel),
    clients: o.clients,
    path: o.path,
    ...s,
    listRaw: async () => {
      const list = await o.list(s);
      return { metadata: list.metadata, items: list.items.map((i) => ObjectSerializer.serialize(i, o.type, '') as RawObject) };
    },
    fromRaw: (raw) => ObjectSerializer.deserialize(raw, o.type, '') as T,
    summarize: o.summarize ?? ((obj) => statusSummary(obj as Parameters<typeof statusSummary>[0])),
  };
}

export const pods = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<V1Pod> =>
  typed({
    what: 'pods',
    type: 'V1Pod',
    clients,
    namespace,
    sel,
    path: `/api/v1/namespaces/${namespace}/pods`,
    list: (s) => clients.core.listNamespacedPod({ namespace, ...s }),
  });

/** Events, e.g. of one object: `{ fieldSelector: 'involvedObject.uid=…' }`. */
export const events = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<CoreV1Event> =>
  typed({
    what: 'events',
    type: 'CoreV1Event',
    clients,
    namespace,
    sel,
    path: `/api/v1/namespaces/${namespace}/events`,
    list: (s) => clients.core.listNamespacedEvent({ namespace, ...s }),
    summarize: (e) => `${e.involvedObject.kind}/${e.involvedObject.name} ${e.type} ${e.reason} x${e.count ?? 1}: ${e.message}`,
  });

export const eventsOf = (clients: KubeClients, namespace: string, uid: string): Watched<CoreV1Event> =>
  events(clients, namespace, { fieldSelector: `involvedObject.uid=${uid}` });

export const nodes = (clients: KubeClients, sel: Selection = {}): Watched<V1Node> =>
  typed({
    what: 'nodes',
    type: 'V1Node',
    clients,
    sel,
    path: '/api/v1/nodes',
    list: (s) => clients.core.listNode(s),
    // Capacity, images and daemon endpoints would drown the conditions.
    summarize: (n) => ({
      name: n.metadata?.name,
      taints: n.spec?.taints,
      conditions: n.status?.conditions?.map((c) => `${c.type}=${c.status} ${c.reason ?? ''}`),
    }),
  });

export const csrs = (clients: KubeClients, sel: Selection = {}): Watched<V1CertificateSigningRequest> =>
  typed({
    what: 'certificate signing requests',
    type: 'V1CertificateSigningRequest',
    clients,
    sel,
    path: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
    list: (s) => clients.certificates.listCertificateSigningRequest(s),
    summarize: (c) => ({
      name: c.metadata?.name,
      signerName: c.spec.signerName,
      conditions: c.status?.conditions,
      issued: Boolean(c.status?.certificate),
    }),
  });

export const leases = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<V1Lease> =>
  typed({
    what: 'leases',
    type: 'V1Lease',
    clients,
    namespace,
    sel,
    path: `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`,
    list: (s) => clients.coordination.listNamespacedLease({ namespace, ...s }),
    summarize: (l) => ({ name: l.metadata?.name, spec: l.spec }),
  });

export const persistentVolumeClaims = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<V1PersistentVolumeClaim> =>
  typed({
    what: 'persistent volume claims',
    type: 'V1PersistentVolumeClaim',
    clients,
    namespace,
    sel,
    path: `/api/v1/namespaces/${namespace}/persistentvolumeclaims`,
    list: (s) => clients.core.listNamespacedPersistentVolumeClaim({ namespace, ...s }),
  });

export const serviceAccounts = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<V1ServiceAccount> =>
  typed({
    what: 'service accounts',
    type: 'V1ServiceAccount',
    clients,
    namespace,
    sel,
    path: `/api/v1/namespaces/${namespace}/serviceaccounts`,
    list: (s) => clients.core.listNamespacedServiceAccount({ namespace, ...s }),
    summarize: (a) => a.metadata?.name,
  });

/** DaemonSets, their status showing what their pods do on each node. */
export const daemonSets = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<V1DaemonSet> =>
  typed({
    what: 'daemon sets',
    type: 'V1DaemonSet',
    clients,
    namespace,
    sel,
    path: `/apis/apps/v1/namespaces/${namespace}/daemonsets`,
    list: (s) => clients.kc.makeApiClient(AppsV1Api).listNamespacedDaemonSet({ namespace, ...s }),
  });

/** KubeVirt objects (kubevirt.io/v1 unless said): raw JSON both ways, as the custom objects client returns them. */
function kubevirt<T>(
  plural: string,
  clients: KubeClients,
  namespace: string,
  sel: Selection,
  group = 'kubevirt.io',
  version = 'v1',
): Watched<T> {
  const s = selectors(sel);
  return {
    describe: describeOf(plural, namespace, sel),
    clients,
    path: `/apis/${group}/${version}/namespaces/${namespace}/${plural}`,
    ...s,
    listRaw: async () =>
      (await clients.custom.listNamespacedCustomObject({
        group,
        version,
        namespace,
        plural,
        ...s,
      })) as KubernetesListObject<RawObject>,
    fromRaw: (raw) => raw as T,
    summarize: (obj) => statusSummary(obj as Parameters<typeof statusSummary>[0]),
  };
}

export const virtualMachines = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<VirtualMachine> =>
  kubevirt<VirtualMachine>('virtualmachines', clients, namespace, sel);

export const virtualMachineInstances = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<VirtualMachineInstance> =>
  kubevirt<VirtualMachineInstance>('virtualmachineinstances', clients, namespace, sel);

export const virtualMachineInstanceMigrations = (
  clients: KubeClients,
  namespace: string,
  sel: Selection = {},
): Watched<VirtualMachineInstanceMigration> =>
  kubevirt<VirtualMachineInstanceMigration>('virtualmachineinstancemigrations', clients, namespace, sel);

export const virtualMachineInstanceReplicaSets = (
  clients: KubeClients,
  namespace: string,
  sel: Selection = {},
): Watched<VirtualMachineInstanceReplicaSet> =>
  kubevirt<VirtualMachineInstanceReplicaSet>('virtualmachineinstancereplicasets', clients, namespace, sel);

export const virtualMachinePools = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<VirtualMachinePool> =>
  kubevirt<VirtualMachinePool>('virtualmachinepools', clients, namespace, sel, 'pool.kubevirt.io', 'v1alpha1');

export const dataVolumes = (clients: KubeClients, namespace: string, sel: Selection = {}): Watched<DataVolume> =>
  kubevirt<DataVolume>('datavolumes', clients, namespace, sel, 'cdi.kubevirt.io', 'v1beta1');
