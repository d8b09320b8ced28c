// Waits until CustomResourceDefinitions are served: an object of a kind
// whose CRD was created a moment ago is refused (no such kind) until the
// apiserver sets the CRD's Established condition.
import type { KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from './client.js';

type Crd = KubernetesObject & { status?: { conditions?: Array<{ type: string; status: string }> } };

export const established = (crd: Crd): boolean =>
  crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false;

export async function waitForCrdsEstablished(clients: KubeClients, names: string[], timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (const name of names) {
    for (;;) {
      const crd = (await clients.objects.read({
        apiVersion: 'apiextensions.k8s.io/v1',
        kind: 'CustomResourceDefinition',
        metadata: { name },
      })) as Crd;
      if (established(crd)) break;
      if (Date.now() > deadline) throw new Error(`customresourcedefinitions/${name} is not Established after ${timeoutMs / 1000} s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
