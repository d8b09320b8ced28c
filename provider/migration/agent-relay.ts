// The node agent's relay listener: what it judges a migration's first stream
// on (the local target pod from the pod cache, the VMI's migrationState read
// from the API, not a cache, so a migration that just ended is seen), and its
// start on the InternalIP once the kubelet-serving certificate is issued.
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../log.js';
import { MIGRATION_JOB_LABEL } from '../pods/migration-target.js';
import type { MigrationFacts, MigrationStateCopy } from './relay-auth.js';
import { RelayServer, type AcceptedControl } from './relay-server.js';
import type { RelayCredentials } from './relay-tls.js';

export interface MigrationFactsSources {
  /** The pods bound to this node (the pod controller's cache). */
  pods(): Iterable<V1Pod>;
  /** The pod's VMI read from the API; undefined when it is gone. */
  readVmi(pod: V1Pod): Promise<{ status?: object } | undefined>;
  /** Where each pod's VM directory is, by pod UID (provider/launchers/registry.ts). */
  vmsDir: string;
}

export async function readMigrationFacts(uid: string, from: MigrationFactsSources): Promise<MigrationFacts> {
  const pod = [...from.pods()].find((p) => p.metadata?.labels?.[MIGRATION_JOB_LABEL] === uid && !p.metadata.deletionTimestamp);
  const podUid = pod?.metadata?.uid;
  if (!pod || !podUid) return { migrationState: undefined, targetPod: undefined };
  const vmi = await from.readVmi(pod);
  const status = vmi?.status as { migrationState?: MigrationStateCopy } | undefined;
  return { migrationState: status?.migrationState, targetPod: { vmDir: join(from.vmsDir, podUid) } };
}

/**
 * Listens on address:port. A port another process holds is logged, not
 * fatal: the node runs its pods and only cannot receive migrations (their
 * sources record the connection refused).
 */
export async function startRelayServer(o: {
  nodeName: string;
  address: string;
  port: number;
  credentials: RelayCredentials;
  facts: MigrationFactsSources;
  onControl(stream: AcceptedControl): void;
  log: Logger;
}): Promise<RelayServer | undefined> {
  const server = new RelayServer({
    selfNode: o.nodeName,
    credentials: o.credentials,
    lookup: (uid) => readMigrationFacts(uid, o.facts),
    onControl: o.onControl,
    log: o.log,
  });
  try {
    await server.listen(o.port, o.address);
  } catch (err) {
    await server.close();
    o.log.error({ err, address: o.address, port: o.port }, 'migration relay cannot listen: this node cannot receive live migrations');
    return undefined;
  }
  o.log.info({ address: o.address, port: o.port }, 'migration relay listening');
  return server;
}
