// Kubernetes Events for pods, as the kubelet records them (core/v1 Event,
// source.component "vkvm"). A repeat of the same reason and message for the
// same object bumps the count of the existing Event instead of adding one, like
// client-go's event correlator; recording never fails the caller.
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { LRUCache } from 'lru-cache';
import type { KubeClients } from './client.js';
import { mergePatch } from './client.js';
import { isNotFound } from './errors.js';
import type { Logger } from '../log.js';

export type EventType = 'Normal' | 'Warning';

export interface EventRecorder {
  record(pod: V1Pod, type: EventType, reason: string, message: string): void;
}

export function createEventRecorder(clients: KubeClients, nodeName: string, log: Logger): EventRecorder {
  const seen = new LRUCache<string, { name: string; count: number }>({ max: 4096 });
  // Events of one object are written in order, so a repeat patches the Event its first copy created.
  let tail: Promise<unknown> = Promise.resolve();

  const write = async (pod: V1Pod, type: EventType, reason: string, message: string): Promise<void> => {
    const namespace = pod.metadata?.namespace ?? 'default';
    const key = JSON.stringify([pod.metadata?.uid, type, reason, message]);
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
    const container = pod.spec?.containers?.[0]?.name;
    const event: CoreV1Event = {
      metadata: { generateName: `${pod.metadata?.name ?? 'pod'}.`, namespace },
      involvedObject: {
        apiVersion: 'v1',
        kind: 'Pod',
        name: pod.metadata?.name ?? '',
        namespace,
        uid: pod.metadata?.uid ?? '',
        ...(container ? { fieldPath: `spec.containers{${container}}` } : {}),
      },
      type,
      reason,
      message,
      source: { component: 'vkvm', host: nodeName },
      reportingComponent: 'vkvm',
      reportingInstance: nodeName,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    const created = await clients.core.createNamespacedEvent({ namespace, body: event });
    seen.set(key, { name: created.metadata?.name ?? '', count: 1 });
  };

  return {
    record(pod, type, reason, message) {
      tail = tail
        .then(() => write(pod, type, reason, message))
        .catch((err: unknown) => log.warn({ err, pod: `${pod.metadata?.namespace}/${pod.metadata?.name}`, reason }, 'could not record event'));
    },
  };
}
