// Kubernetes Events (core/v1 Event) for pods, as the kubelet records them, and
// for any object a controller acts on (VMs, VMIs), as client-go's recorder
// does. A repeat of the same reason and message for the same object bumps the
// count of the existing Event instead of adding one, like client-go's event
// correlator; recording never fails the caller.
import type { CoreV1Event, V1ObjectReference, V1Pod } from '@kubernetes/client-node';
import { LRUCache } from 'lru-cache';
import type { KubeClients } from './client.js';
import { mergePatch } from './client.js';
import { isNotFound } from './errors.js';
import type { Logger } from '../log.js';

export type EventType = 'Normal' | 'Warning';

export interface EventRecorder {
  /** An event of the pod's (only) container. */
  record(pod: V1Pod, type: EventType, reason: string, message: string): void;
  /** An event of any namespaced object: apiVersion, kind, name, namespace and uid are needed. */
  recordFor(object: V1ObjectReference, type: EventType, reason: string, message: string): void;
}

/** Who records: source.component and reportingController (e.g. vkvm, virtualmachine-controller), and the node or host. */
export interface EventSource {
  component: string;
  host: string;
}

/** The reference an event of a custom object (a VM, a VMI) needs. */
export function objectReference(o: {
  apiVersion?: string;
  kind?: string;
  metadata: { name?: string; namespace?: string; uid?: string };
}): V1ObjectReference {
  return {
    apiVersion: o.apiVersion ?? '',
    kind: o.kind ?? '',
    name: o.metadata.name ?? '',
    namespace: o.metadata.namespace ?? 'default',
    uid: o.metadata.uid ?? '',
  };
}

export function createEventRecorder(clients: KubeClients, source: EventSource, log: Logger): EventRecorder {
  const seen = new LRUCache<string, { name: string; count: number }>({ max: 4096 });
  // Events of one object are written in order, so a repeat patches the Event its first copy created.
  let tail: Promise<unknown> = Promise.resolve();

  const write = async (object: V1ObjectReference, type: EventType, reason: string, message: string): Promise<void> => {
    const namespace = object.namespace ?? 'default';
    const key = JSON.stringify([object.uid, type, reason, message]);
    const now = new Date();
    const previous = seen.get(key);
    if (previous) {
      const count = previous.count + 1;
      try {
        await clients.core.patchNamespacedEvent({ name: previous.name, namespace, body: { count, lastTimestamp: now } }, mergePatch);
        seen.set(key, { name: previous.name, count });
        return;
      } catch (err) {
        // Events expire (1 h by default): a repeat after that starts a new one.
        if (!isNotFound(err)) throw err;
        seen.delete(key);
      }
    }
    const event: CoreV1Event = {
      metadata: { generateName: `${object.name ?? 'object'}.`, namespace },
      involvedObject: { ...object, namespace },
      type,
      reason,
      message,
      source: { component: source.component, host: source.host },
      reportingComponent: source.component,
      reportingInstance: source.host,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    const created = await clients.core.createNamespacedEvent({ namespace, body: event });
    seen.set(key, { name: created.metadata?.name ?? '', count: 1 });
  };

  const recordFor = (object: V1ObjectReference, type: EventType, reason: string, message: string): void => {
    tail = tail
      .then(() => write(object, type, reason, message))
      .catch((err: unknown) =>
        log.warn({ err, object: `${object.kind} ${object.namespace}/${object.name}`, reason }, 'could not record event'),
      );
  };
  return {
    recordFor,
    record(pod, type, reason, message) {
      const container = pod.spec?.containers?.[0]?.name;
      const ref: V1ObjectReference = {
        apiVersion: 'v1',
        kind: 'Pod',
        name: pod.metadata?.name ?? '',
        namespace: pod.metadata?.namespace ?? 'default',
        uid: pod.metadata?.uid ?? '',
      };
      recordFor(container ? { ...ref, fieldPath: `spec.containers{${container}}` } : ref, type, reason, message);
    },
  };
}
