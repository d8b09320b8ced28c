// GET /pods: the pods this node runs, as a PodList (what `kubectl get --raw
// /api/v1/nodes/<n>/proxy/pods` and metrics pipelines read).
// GET /runningpods/: the subset whose VM is running (phase Running), as the
// kubelet lists the pods its runtime has running.
import type { V1Pod } from '@kubernetes/client-node';
import type { FastifyInstance } from 'fastify';

export type PodLister = () => V1Pod[];

const podList = (items: V1Pod[]) => ({ kind: 'PodList', apiVersion: 'v1', metadata: {}, items });

export async function podsRoutes(app: FastifyInstance, opts: { listPods: PodLister }): Promise<void> {
  app.get('/pods', async () => podList(opts.listPods()));
  const running = async () => podList(opts.listPods().filter((p) => p.status?.phase === 'Running'));
  // The kubelet's path has the trailing slash; accept it without too.
  app.get('/runningpods/', running);
  app.get('/runningpods', running);
}
