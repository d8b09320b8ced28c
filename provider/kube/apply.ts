// Server-side apply of manifest files, as `kubectl apply --server-side` does:
// idempotent, and it never clobbers fields other managers own.
import { readFile } from 'node:fs/promises';
import { loadAllYaml, PatchStrategy, type KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from './client.js';

export const FIELD_MANAGER = 'vkvm';

/**
 * The objects in a manifest file, as client-node models. The patch call
 * serialises by model field (`xKubernetesPreserveUnknownFields` →
 * `x-kubernetes-preserve-unknown-fields`), so plain parsed YAML would lose
 * every such field of a built-in kind on the way to the apiserver; client-node's
 * own loader maps them.
 */
export async function readManifests(path: string): Promise<KubernetesObject[]> {
  const text = await readFile(path, 'utf8');
  let docs: unknown[];
  try {
    docs = loadAllYaml(text);
  } catch (err) {
    throw new Error(`${path}: ${(err as Error).message}`, { cause: err });
  }
  return docs.filter((d): d is KubernetesObject => d !== null && d !== undefined);
}

export async function applyManifests(clients: KubeClients, objects: KubernetesObject[]): Promise<void> {
  for (const obj of objects) {
    await clients.objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
  }
}
