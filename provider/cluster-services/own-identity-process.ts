// A cluster-wide sidecar vkvm up runs beside the control plane (the snapshot
// controller, the resizer): a host process with an identity of its own, a
// client certificate of user `user` that vkvm up, as admin, approves through
// the CSR API, restarted when it exits and ended with vkvm up.
import { join } from 'node:path';
import { ensureOwnIdentity } from '../certs/client-credentials.js';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { SupervisedProcess, type SupervisedCommand } from '../supervised-process.js';

export interface OwnIdentityProcess {
  /** Its name in logs and in the CSR's name (`vkvm-<slug>`), and its log file (`<slug>.log`). */
  name: string;
  slug: string;
  user: string;
  /** Admin clients: they approve its CSR. */
  clients: KubeClients;
  /** Its credentials and log (0700), kept across runs like the sidecars'. */
  dir: string;
  command: (kubeconfig: string) => SupervisedCommand;
  log: Logger;
}

export interface RunningOwnIdentityProcess {
  stop(): Promise<void>;
}

export async function startOwnIdentityProcess(o: OwnIdentityProcess): Promise<RunningOwnIdentityProcess> {
  const kubeconfig = await ensureOwnIdentity(o.clients, o);
  const process = new SupervisedProcess({
    name: o.name,
    command: async () => o.command(kubeconfig),
    logFile: join(o.dir, `${o.slug}.log`),
    log: o.log,
  });
  process.start();
  o.log.info({ dir: o.dir }, `${o.name} runs`);
  return { stop: () => process.stop() };
}
