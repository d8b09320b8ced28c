// What the QEMU guest agent reports when asked: the users logged in
// (guest-get-users), the filesystems mounted on block devices
// (guest-get-fsinfo), and the agent itself with the guest's host name and
// time zone (guest-info, guest-get-host-name, guest-get-timezone), in the
// launcher's own shapes. Fields are renamed, never
// interpreted; an entry without its required fields is left out rather than
// guessed at.
import type { VmSpec } from '../vmm/spec.js';
import type { DomainDriver } from './domain-driver.js';
import { PreconditionError } from './errors.js';
import { guestExec, type AgentCall, type GuestExecRequest, type GuestExecResult } from './guest-exec.js';

/** The guest agent of the domain, once the spec has one and the VM runs; FAILED_PRECONDITION otherwise. */
export async function agentOf(
  spec: VmSpec | undefined,
  driver: Pick<DomainDriver, 'state' | 'agentCommand'>,
  domainUuid: string,
): Promise<AgentCall> {
  if (!spec?.guestAgent) throw new PreconditionError('the VM has no guest agent channel (spec.guestAgent is false)', ['guestAgent']);
  const s = await driver.state(domainUuid);
  if (s !== 'running' && s !== 'blocked') throw new PreconditionError(`the VM is ${s}; guest commands need it running`);
  return (command, timeoutS) => driver.agentCommand(domainUuid, command, timeoutS);
}

export interface GuestUser {
  name: string;
  /** Windows guests only. */
  domain?: string;
  /** When the user logged in, seconds since the epoch (fractional). */
  loginTimeS: number;
}

export interface GuestFilesystemDisk {
  busType: string;
  serial?: string;
}

export interface GuestFilesystem {
  /** The device, e.g. "vda1". */
  diskName: string;
  mountPoint: string;
  type: string;
  /** 0 when the agent could not stat the filesystem. */
  usedBytes: number;
  totalBytes: number;
  disks: GuestFilesystemDisk[];
}

export interface GuestAgentInfo {
  agentVersion: string;
  supportedCommands: Array<{ name: string; enabled: boolean }>;
  /** Empty when the agent does not say. */
  hostname: string;
  /** "ZONE, OFFSET_SECONDS", as KubeVirt words it; empty when the agent does not say. */
  timezone: string;
}

/** Each query may take this long before the agent counts as unresponsive. */
const AGENT_QUERY_TIMEOUT_S = 10;

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const entries = (reply: unknown): Array<Record<string, unknown>> =>
  Array.isArray(reply) ? reply.filter((e): e is Record<string, unknown> => typeof e === 'object' && e !== null) : [];

export function usersFromAgent(reply: unknown): GuestUser[] {
  return entries(reply).flatMap((u) => {
    const name = str(u.user);
    if (!name) return [];
    const domain = str(u.domain);
    return [{ name, ...(domain ? { domain } : {}), loginTimeS: num(u['login-time']) ?? 0 }];
  });
}

export function filesystemsFromAgent(reply: unknown): GuestFilesystem[] {
  return entries(reply).flatMap((f) => {
    const diskName = str(f.name);
    const mountPoint = str(f.mountpoint);
    if (!diskName || !mountPoint) return [];
    const disks = entries(f.disk).map((d) => {
      const serial = str(d.serial);
      return { busType: str(d['bus-type']) ?? 'unknown', ...(serial ? { serial } : {}) };
    });
    return [
      {
        diskName,
        mountPoint,
        type: str(f.type) ?? '',
        usedBytes: num(f['used-bytes']) ?? 0,
        totalBytes: num(f['total-bytes']) ?? 0,
        disks,
      },
    ];
  });
}

export async function guestUsers(call: AgentCall): Promise<GuestUser[]> {
  return usersFromAgent(await call({ execute: 'guest-get-users' }, AGENT_QUERY_TIMEOUT_S));
}

export async function guestFilesystems(call: AgentCall): Promise<GuestFilesystem[]> {
  return filesystemsFromAgent(await call({ execute: 'guest-get-fsinfo' }, AGENT_QUERY_TIMEOUT_S));
}

/** guest-info, guest-get-host-name and guest-get-timezone's replies as GuestAgentInfo. */
export function agentInfoFromReplies(info: unknown, host: unknown, zone: unknown): GuestAgentInfo {
  const i = (info ?? {}) as Record<string, unknown>;
  const h = (host ?? {}) as Record<string, unknown>;
  const z = (zone ?? {}) as Record<string, unknown>;
  const offset = num(z.offset);
  return {
    agentVersion: str(i.version) ?? '',
    supportedCommands: entries(i.supported_commands).flatMap((c) => {
      const name = str(c.name);
      return name ? [{ name, enabled: c.enabled === true }] : [];
    }),
    hostname: str(h['host-name']) ?? '',
    timezone: offset === undefined ? '' : `${str(z.zone) ?? ''}, ${offset}`,
  };
}

/** The agent's version and commands; the host name and time zone are left empty when an older agent lacks their commands. */
export async function guestAgentInfo(call: AgentCall): Promise<GuestAgentInfo> {
  const optional = (execute: string) => call({ execute }, AGENT_QUERY_TIMEOUT_S).catch(() => undefined);
  const info = await call({ execute: 'guest-info' }, AGENT_QUERY_TIMEOUT_S);
  return agentInfoFromReplies(info, await optional('guest-get-host-name'), await optional('guest-get-timezone'));
}

/** What can be asked of a VM's guest agent, each call on the agent `connect` yields (it checks the VM can be asked). */
export interface GuestAgent {
  exec(req: GuestExecRequest): Promise<GuestExecResult>;
  users(): Promise<GuestUser[]>;
  filesystems(): Promise<GuestFilesystem[]>;
  agentInfo(): Promise<GuestAgentInfo>;
}

export function guestAgent(connect: () => Promise<AgentCall>): GuestAgent {
  return {
    exec: async (req) => guestExec(await connect(), req),
    users: async () => guestUsers(await connect()),
    filesystems: async () => guestFilesystems(await connect()),
    agentInfo: async () => guestAgentInfo(await connect()),
  };
}
