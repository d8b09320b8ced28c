// Registers this host as a Node: creates it, or adopts the existing Node of
// the same name (keeping its UID) so a restarted agent never makes a second one.
import type { V1Node, V1Taint } from '@kubernetes/client-node';
import type { AgentConfig } from '../config.js';
import { mergePatch, type KubeClients } from '../kube/client.js';
import { isConflict, isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';

/** Our taints replace any with the same key and effect; other components' taints stay. */
export function mergeTaints(existing: V1Taint[], ours: V1Taint[]): V1Taint[] {
  const ourKeys = new Set(ours.map((t) => `${t.key}:${t.effect}`));
  return [...existing.filter((t) => !ourKeys.has(`${t.key}:${t.effect}`)), ...ours];
}

export async function registerNode(
  clients: KubeClients,
  config: AgentConfig,
  labels: Record<string, string>,
  log: Logger,
  annotations: Record<string, string> = {},
): Promise<V1Node> {
  const name = config.nodeName;
  const taints: V1Taint[] = config.taints.map((t) => ({ ...t }));
  for (let attempt = 0; ; attempt++) {
    let node: V1Node;
    try {
      node = await clients.core.readNode({ name });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        const created = await clients.core.createNode({
          body: { apiVersion: 'v1', kind: 'Node', metadata: { name, labels, annotations }, spec: { taints } },
        });
        log.info({ uid: created.metadata?.uid }, 'registered node');
        return created;
      } catch (createErr) {
        // Another agent instance won the race: adopt its node below.
        if (attempt < 3 && isConflict(createErr)) continue;
        throw createErr;
      }
    }
    try {
      const adopted = await clients.core.patchNode(
        {
          name,
          body: {
            metadata: { resourceVersion: node.metadata?.resourceVersion, labels, annotations },
            spec: { taints: mergeTaints(node.spec?.taints ?? [], taints) },
          },
        },
        mergePatch,
      );
      log.info({ uid: adopted.metadata?.uid }, 'adopted existing node');
      return adopted;
    } catch (err) {
      if (attempt < 3 && isConflict(err)) continue;
      throw err;
    }
  }
}
