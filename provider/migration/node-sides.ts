// The node agent's two sides of live migration, built once: the target side
// (receives VMs; takes the relay server's control streams) and the source side
// (sends VMs through the relay client, dialling with the node's client
// certificate). The relay server starts later, with the serving certificate;
// the target finds it through `relay()`.
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { LauncherRegistry } from '../launchers/registry.js';
import type { Logger } from '../log.js';
import type { PodNetwork } from '../network/pod-network.js';
import { ipv4PodCidrOf } from '../network/peer-routes.js';
import type { PodImages } from '../images/pod-images.js';
import type { NodeDns } from '../pods/guest-dns.js';
import type { VmiSource } from '../pods/vmi-source.js';
import { relayClientCredentials } from './relay-credentials.js';
import { RelayClient } from './relay-client.js';
import type { RelayServer } from './relay-server.js';
import { MigrationSource } from './source.js';
import { MigrationTarget } from './target.js';

export interface MigrationSides {
  target: MigrationTarget;
  source: MigrationSource;
  close(): Promise<void>;
}

export function migrationSides(o: {
  nodeName: string;
  port: number;
  stateDir: string;
  clients: KubeClients;
  launchers: LauncherRegistry;
  network: PodNetwork;
  vmis: VmiSource;
  images: PodImages;
  dns: () => NodeDns;
  relay: () => RelayServer | undefined;
  log: Logger;
}): MigrationSides {
  const log = o.log.child({ component: 'migration' });
  const client = new RelayClient({
    credentials: relayClientCredentials(o.clients, { nodeName: o.nodeName, pemPath: join(o.stateDir, 'pki', 'relay-client.pem'), log }),
    log,
  });
  const target = new MigrationTarget({
    launchers: o.launchers,
    network: o.network,
    vmis: o.vmis,
    images: o.images,
    podCidrOf: async (node) => (node ? ipv4PodCidrOf((await o.clients.core.readNode({ name: node })).spec) : undefined),
    sourceImageID: (vmi) => runningImageID(o.clients, vmi).catch(() => undefined),
    relay: o.relay,
    dns: o.dns,
    log,
  });
  const source = new MigrationSource({
    nodeName: o.nodeName,
    launchers: o.launchers,
    relay: client,
    relayPort: o.port,
    network: o.network,
    qemuUidOf: (uid) => o.launchers.qemuUidOf(uid),
    log,
  });
  return { target, source, close: () => client.close() };
}

/** The container imageID of the VMI's launcher pod on its node: the image its VM runs. */
async function runningImageID(clients: KubeClients, vmi: VirtualMachineInstance): Promise<string | undefined> {
  const { items } = await clients.core.listNamespacedPod({
    namespace: vmi.metadata.namespace ?? 'default',
    labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}`,
  });
  const pod = items.find((p: V1Pod) => p.spec?.nodeName === vmi.status?.nodeName && !p.metadata?.labels?.['kubevirt.io/migrationJobUID']);
  return pod?.status?.containerStatuses?.[0]?.imageID;
}
