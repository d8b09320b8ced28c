// GET virtualmachineinstances/NAME/console, upgraded to a WebSocket with
// subprotocol plain.kubevirt.io: raw serial bytes both ways in binary
// messages, relayed to the node's attach stream (node-console.ts). Checks and
// codes are KubeVirt's: a VMI not running is 400 (virtctl console retries
// it), a Failed one 409. One console per VMI: a new session closes the old
// one, as virt-handler does.
import type { FastifyInstance } from 'fastify';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { KubeClients } from '../../kube/client.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstance } from '../../kubevirt/types.js';
import { CREATED_BY_LABEL, LAUNCHER_SELECTOR } from '../../controllers/launcher-pod.js';
import { isUpgrade, takeUpgrade } from '../../kubelet-api/upgrade.js';
import { badRequest, conflict } from '../errors.js';
import { CHANNEL, type ConsoleDialer } from '../node-console.js';
import { NAMESPACED, nameParams, type NameParams } from './params.js';
import { readVmi } from './vmi.js';

export const PLAIN_PROTOCOL = 'plain.kubevirt.io';
/** The launcher pod's one container, which the node's attach names. */
const COMPUTE_CONTAINER = 'compute';
/** What a serial console sends at most in one message; more closes the session (1009). */
const MAX_MESSAGE_BYTES = 1024 * 1024;

export interface ConsoleRoutesOptions {
  kubevirt: KubevirtApi;
  clients: KubeClients;
  dial: ConsoleDialer;
}

export function checkConsole(vmi: VirtualMachineInstance): void {
  if (vmi.spec.domain?.devices?.autoattachSerialConsole === false) throw badRequest('No serial consoles are present.');
  if (vmi.status?.phase === 'Failed') throw conflict('virtualmachineinstance', vmi.metadata.name!, 'VMI is in failed status');
  if (vmi.status?.phase !== 'Running') throw badRequest('VMI is not running');
}

/** Relays until either side ends; ends the other. */
function relay(client: WebSocket, node: WebSocket): Promise<void> {
  client.on('message', (data: RawData) => {
    const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    node.send(Buffer.concat([Buffer.of(CHANNEL.stdin), bytes]));
  });
  node.on('message', (data: RawData) => {
    const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    if (bytes[0] === CHANNEL.stdout || bytes[0] === CHANNEL.stderr) client.send(bytes.subarray(1));
  });
  return new Promise((resolve) => {
    const end = () => {
      client.close();
      node.close();
      resolve();
    };
    client.once('close', end);
    node.once('close', end);
    client.once('error', end);
    node.once('error', end);
  });
}

export async function consoleRoutes(app: FastifyInstance, opts: ConsoleRoutesOptions): Promise<void> {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, handleProtocols: (offered) => (offered.has(PLAIN_PROTOCOL) ? PLAIN_PROTOCOL : false) });
  /** The open console of each VMI (by UID). */
  const sessions = new Map<string, WebSocket>();
  app.addHook('preClose', async () => {
    for (const ws of sessions.values()) ws.terminate();
  });

  app.get<{ Params: NameParams }>(
    `${NAMESPACED}/virtualmachineinstances/:name/console`,
    { schema: { params: nameParams }, config: { authorize: { resource: 'virtualmachineinstances', subresource: 'console' } } },
    async (req, reply) => {
      if (!isUpgrade(req.raw)) throw badRequest('the console is a WebSocket: send an upgrade request');
      const { namespace, name } = req.params;
      const vmi = await readVmi(opts.kubevirt, req.params);
      checkConsole(vmi);
      const uid = vmi.metadata.uid!;
      const pods = await opts.clients.core.listNamespacedPod({ namespace, labelSelector: `${LAUNCHER_SELECTOR},${CREATED_BY_LABEL}=${uid}`, fieldSelector: 'status.phase==Running' });
      const pod = pods.items[0];
      const node = pod?.spec?.nodeName ?? vmi.status?.nodeName;
      if (!pod || !node) throw badRequest('VMI is not running');
      // Dialled before the upgrade, so a node that cannot be reached is an HTTP error virtctl shows.
      const nodeWs = await opts.dial({ node, namespace, pod: pod.metadata!.name!, container: COMPUTE_CONTAINER });
      reply.hijack();
      const upgrade = takeUpgrade(req.raw);
      const log = req.log.child({ vmi: `${namespace}/${name}`, uid, node, user: req.user?.username });
      let accepted = false;
      // ws answers a failed handshake itself and never calls back: the node's stream then has no client.
      upgrade.socket.once('close', () => {
        if (!accepted) nodeWs.close();
      });
      wss.handleUpgrade(req.raw, upgrade.socket, upgrade.head, (client) => {
        accepted = true;
        sessions.get(uid)?.close(1000, 'a new console session replaced this one');
        sessions.set(uid, client);
        log.info('console session started');
        void relay(client, nodeWs).then(() => {
          if (sessions.get(uid) === client) sessions.delete(uid);
          log.info('console session ended');
        });
      });
    },
  );
}
