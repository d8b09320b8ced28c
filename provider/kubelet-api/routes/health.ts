// /healthz on the kubelet port (authenticated, nodes/proxy), as the kubelet serves it.
import type { FastifyInstance } from 'fastify';

export async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get('/healthz', async (_req, reply) => reply.type('text/plain').send('ok'));
}
