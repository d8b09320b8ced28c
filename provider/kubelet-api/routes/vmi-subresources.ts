// KubeVirt's VMI subresources that need the VM itself, served by the node as
// virt-handler serves them to virt-api: the serial console (a WebSocket with
// subprotocol plain.kubevirt.io), the guest agent's user and filesystem lists
// and guest OS info in KubeVirt's JSON shapes, and soft reboot. The paths are the subresource
// API's (provider/subresources/, which forwards here), and so is the
// authorization: a SubjectAccessReview on the VMI's subresource in
// subresources.kubevirt.io, whoever calls. The subresource API calls with its
// own identity after authorizing its user; a user who reaches the node
// directly needs the same grant. One console per VMI: a new session closes
// the one before, as virt-handler does. A console holds a slot of the node's
// streaming caps (the displaced one until it has closed) and is closed after
// --streaming-connection-idle-timeout without traffic either way, as exec
// and attach are.
import type { FastifyInstance } from 'fastify';
import type { WebSocket } from 'ws';
import { BadRequestError } from '../errors.js';
import type { ResourceAttributes } from '../auth.js';
import { releaseOnClose, type SessionLimiter } from '../session-limiter.js';
import { closeWhenIdle } from '../streaming/idle-timer.js';
import {
  acceptPlainWebSocket,
  offersPlainProtocol,
  plainWebSocketServer,
  relayPlain,
  PLAIN_PROTOCOL,
} from '../streaming/plain-websocket.js';
import { isUpgrade, takeUpgrade } from '../upgrade.js';
import type { GuestFilesystem, GuestInfo, GuestUser, VmAccess } from '../vm-access.js';

export const SUBRESOURCE_GROUP = 'subresources.kubevirt.io';
/** Where each VMI subresource is served, on the node as on the aggregated API. */
export const VMI_SUBRESOURCE_PATH = `/apis/${SUBRESOURCE_GROUP}/v1/namespaces/:namespace/virtualmachineinstances/:name`;

interface VmiParams {
  namespace: string;
  name: string;
}

const paramsSchema = {
  type: 'object',
  required: ['namespace', 'name'],
  properties: { namespace: { type: 'string', minLength: 1 }, name: { type: 'string', minLength: 1 } },
} as const;

/** The route's SubjectAccessReview: KubeVirt's authorizer maps GET to get and PUT to update. */
export const vmiSubresource =
  (subresource: string) =>
  (params: Record<string, string>, method: string): ResourceAttributes => ({
    verb: method === 'PUT' ? 'update' : 'get',
    group: SUBRESOURCE_GROUP,
    resource: 'virtualmachineinstances',
    subresource,
    namespace: params.namespace!,
    name: params.name!,
  });

/** KubeVirt's VirtualMachineInstanceGuestOSUserList. */
export const userList = (users: GuestUser[]) => ({
  metadata: {},
  items: users.map((u) => ({ userName: u.name, ...(u.domain ? { domain: u.domain } : {}), loginTime: u.loginTimeS })),
});

const filesystem = (f: GuestFilesystem) => ({
  diskName: f.diskName,
  mountPoint: f.mountPoint,
  fileSystemType: f.type,
  usedBytes: f.usedBytes,
  totalBytes: f.totalBytes,
  ...(f.disks.length > 0 ? { disk: f.disks.map((d) => ({ ...(d.serial ? { serial: d.serial } : {}), busType: d.busType })) } : {}),
});

/** KubeVirt's VirtualMachineInstanceFileSystemList. */
export const filesystemList = (filesystems: GuestFilesystem[]) => ({ metadata: {}, items: filesystems.map(filesystem) });

/** KubeVirt's VirtualMachineInstanceGuestAgentInfo (empty fields left out, as its omitempty does). */
export const guestAgentInfo = (g: GuestInfo) => ({
  ...(g.agent.agentVersion ? { guestAgentVersion: g.agent.agentVersion } : {}),
  ...(g.agent.supportedCommands.length > 0
    ? { supportedCommands: g.agent.supportedCommands.map((c) => ({ name: c.name, ...(c.enabled ? { enabled: true } : {}) })) }
    : {}),
  ...(g.agent.hostname ? { hostname: g.agent.hostname } : {}),
  os: g.os ?? {},
  ...(g.agent.timezone ? { timezone: g.agent.timezone } : {}),
  ...(g.users.length > 0 ? { userList: userList(g.users).items } : {}),
  fsInfo: { disks: g.filesystems.map(filesystem) },
});

export interface VmiSubresourceOptions {
  vms: VmAccess;
  /** Each console counts as a session (endpoint vmi-console). */
  sessions: SessionLimiter;
  /** A console without traffic for this long is closed (IdleTimer). */
  idleTimeoutMs: number;
}

export async function vmiSubresourceRoutes(app: FastifyInstance, opts: VmiSubresourceOptions): Promise<void> {
  const { vms } = opts;
  const wss = plainWebSocketServer();
  /** The open console of each VMI, by VMI UID. */
  const consoles = new Map<string, WebSocket>();
  app.addHook('preClose', async () => {
    for (const ws of consoles.values()) ws.terminate();
  });

  const route = (subresource: string) => ({
    schema: { params: paramsSchema },
    config: { authorizeAs: vmiSubresource(subresource) },
  });

  app.get<{ Params: VmiParams }>(`${VMI_SUBRESOURCE_PATH}/console`, route('console'), async (req, reply) => {
    if (!isUpgrade(req.raw)) throw new BadRequestError('the console is a WebSocket: send an upgrade request');
    if (!offersPlainProtocol(req.raw)) throw new BadRequestError(`the console speaks the WebSocket subprotocol ${PLAIN_PROTOCOL}`);
    const { namespace, name } = req.params;
    const ref = vms.vmiPod(namespace, name);
    // Refused (429) before the console is opened or the open one displaced.
    releaseOnClose(opts.sessions.acquire(req.user!, 'vmi-console'), req.raw.socket);
    // Attached before the upgrade: a VM that is not running is a plain 400, which virtctl retries.
    const serial = await vms.attachConsole(ref);
    reply.hijack();
    const log = req.log.child({ vmi: `${namespace}/${name}`, uid: ref.vmiUid, user: req.user?.username });
    const ws = await acceptPlainWebSocket(wss, req.raw, takeUpgrade(req.raw));
    if (!ws) return void serial.destroy();
    consoles.get(ref.vmiUid)?.close(1000, 'a new console session replaced this one');
    consoles.set(ref.vmiUid, ws);
    log.info('console session started');
    const idle = closeWhenIdle(ws, opts.idleTimeoutMs, log);
    const relayed = relayPlain(ws, serial);
    // Now that the relay reads it (see IdleTimer.watch).
    idle.watch([serial]);
    await relayed;
    idle.stop();
    if (consoles.get(ref.vmiUid) === ws) consoles.delete(ref.vmiUid);
    log.info('console session ended');
  });

  app.get<{ Params: VmiParams }>(`${VMI_SUBRESOURCE_PATH}/guestosinfo`, route('guestosinfo'), async (req) =>
    guestAgentInfo(await vms.guestInfo(vms.vmiPod(req.params.namespace, req.params.name))),
  );

  app.get<{ Params: VmiParams }>(`${VMI_SUBRESOURCE_PATH}/userlist`, route('userlist'), async (req) =>
    userList(await vms.guestUsers(vms.vmiPod(req.params.namespace, req.params.name))),
  );

  app.get<{ Params: VmiParams }>(`${VMI_SUBRESOURCE_PATH}/filesystemlist`, route('filesystemlist'), async (req) =>
    filesystemList(await vms.guestFilesystems(vms.vmiPod(req.params.namespace, req.params.name))),
  );

  app.put<{ Params: VmiParams }>(`${VMI_SUBRESOURCE_PATH}/softreboot`, route('softreboot'), async (req, reply) => {
    const { namespace, name } = req.params;
    await vms.softReboot(vms.vmiPod(namespace, name));
    req.log.info({ vmi: `${namespace}/${name}`, user: req.user?.username }, 'guest reboot requested');
    return reply.code(202).send();
  });
}
