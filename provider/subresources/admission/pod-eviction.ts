// POST /admission/pod-eviction: the validating webhook on pods/eviction
// (deploy/eviction-webhook.yaml), KubeVirt's eviction interceptor. It reads
// the pod and its VMI from the API (the review carries only the Eviction),
// asks evictionDecision, and answers an AdmissionReview: allowed, or refused
// with 429 so `kubectl drain` retries. Its side effects, skipped on a dry
// run (sideEffects NoneOnDryRun): the VMI's status.evacuationNodeName, which
// the evacuation controller acts on, and an EvictionBlocked Event on a VMI
// that blocks the drain. A failure to read or write is a 429 too: the drain
// retries rather than evicting a VM it should have moved.
import type { V1Pod } from '@kubernetes/client-node';
import type { FastifyInstance } from 'fastify';
import { objectReference, type EventRecorder } from '../../kube/events.js';
import { apiMessage, isNotFound } from '../../kube/errors.js';
import type { KubeClients } from '../../kube/client.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import { KUBEVIRT_API_VERSION, VMI_PLURAL, type EvictionStrategy, type VirtualMachineInstance } from '../../kubevirt/types.js';
import { DOMAIN_ANNOTATION, VMI_NAME_LABEL } from '../../controllers/launcher-pod.js';
import { EVICTION_BLOCKED, evictionDecision } from './eviction-decision.js';

export const POD_EVICTION_PATH = '/admission/pod-eviction';

interface AdmissionReview {
  apiVersion?: string;
  kind?: string;
  request?: { uid: string; name?: string; namespace?: string; dryRun?: boolean };
}

const reviewSchema = {
  type: 'object',
  required: ['request'],
  properties: {
    request: {
      type: 'object',
      required: ['uid'],
      properties: { uid: { type: 'string' }, name: { type: 'string' }, namespace: { type: 'string' }, dryRun: { type: 'boolean' } },
    },
  },
} as const;

export interface PodEvictionOptions {
  clients: KubeClients;
  kubevirt: KubevirtApi;
  events: EventRecorder;
  /** The cluster's evictionStrategy, for VMIs that set none. */
  evictionStrategy: EvictionStrategy;
}

const answer = (uid: string, allowed: boolean, message?: string) => ({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  response: { uid, allowed, ...(allowed ? {} : { status: { code: 429, reason: 'TooManyRequests', message } }) },
});

export async function podEvictionRoutes(app: FastifyInstance, opts: PodEvictionOptions): Promise<void> {
  const { clients, kubevirt } = opts;

  const readPod = (namespace: string, name: string): Promise<V1Pod | undefined> =>
    clients.core.readNamespacedPod({ namespace, name }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
  const readVmi = (namespace: string, pod: V1Pod): Promise<VirtualMachineInstance | undefined> => {
    const name = pod.metadata?.labels?.[VMI_NAME_LABEL] ?? pod.metadata?.annotations?.[DOMAIN_ANNOTATION];
    if (!name) return Promise.resolve(undefined);
    return kubevirt.getVmi(namespace, name).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
  };

  app.post<{ Body: AdmissionReview }>(POD_EVICTION_PATH, { schema: { body: reviewSchema }, config: { webhook: true } }, async (req) => {
    const { uid, name, namespace = 'default', dryRun = false } = req.body.request!;
    if (!name) return answer(uid, true);
    try {
      const pod = await readPod(namespace, name);
      if (!pod) return answer(uid, true);
      const vmi = await readVmi(namespace, pod);
      const decision = evictionDecision(vmi, pod, opts.evictionStrategy);
      if (decision.allowed) {
        req.log.debug({ pod: `${namespace}/${name}`, why: decision.why }, 'eviction allowed');
        return answer(uid, true);
      }
      if (!dryRun && vmi && decision.evacuateFrom && vmi.status?.evacuationNodeName !== decision.evacuateFrom) {
        // Only this field: the other status fields have their own writers.
        await kubevirt.patchStatus(VMI_PLURAL, namespace, vmi.metadata.name!, undefined, { evacuationNodeName: decision.evacuateFrom });
        req.log.info({ vmi: `${namespace}/${vmi.metadata.name}`, node: decision.evacuateFrom }, 'VMI marked for evacuation');
      }
      if (!dryRun && vmi && decision.blocked) {
        const ref = objectReference({ ...vmi, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance' });
        opts.events.recordFor(ref, 'Warning', EVICTION_BLOCKED, decision.message);
      }
      return answer(uid, false, decision.message);
    } catch (err) {
      req.log.warn({ err, pod: `${namespace}/${name}` }, 'eviction review failed; refused so the drain retries');
      return answer(uid, false, `vkvm could not review the eviction of pod ${namespace}/${name}: ${apiMessage(err)}`);
    }
  });
}
