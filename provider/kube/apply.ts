// Server-side apply of manifest files, as `kubectl apply --server-side` does:
// idempotent, and it never clobbers fields other managers own.
import { readFile } from 'node:fs/promises';
import { PatchStrategy, type KubernetesObject } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import type { KubeClients } from './client.js';

export const FIELD_MANAGER = 'vkvm';

export async function readManifests(path: string): Promise<KubernetesObject[]> {
  const docs = parseAllDocuments(await readFile(path, 'utf8'));
  const objects: KubernetesObject[] = [];
  for (const doc of docs) {
    if (doc.errors.length) throw new Error(`${path}: ${doc.errors[0]!.message}`);
    const obj = doc.toJS() as KubernetesObject | null;
    if (obj) objects.push(obj);
  }
  return objects;
}

export async function applyManifests(clients: KubeClients, objects: KubernetesObject[]): Promise<void> {
  for (const obj of objects) {
    await clients.objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
  }
}
