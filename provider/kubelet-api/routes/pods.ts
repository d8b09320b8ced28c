// GET /pods: the pods this node runs, as a PodList (what `kubectl get --raw
// /api/v1/nodes/<n>/proxy/pods` and metrics pipelines read).
import type { V1Pod } from '@kubernetes/client-node';
import type { FastifyInstance } from 'fastify';

export type PodLister = () => V1Pod[];

export async function podsRoutes(app: FastifyInstance, opts: { listPods: PodLister }): Promise<void> {
  app.get('/pods', async () => ({ kind: 'PodList', apiVersion: 'v1', metadata: {}, items: opts.listPods() }));
}
