// What the QEMU guest agent reports when asked: the users logged in
// (guest-get-users) and the filesystems mounted on block devices
// (guest-get-fsinfo), in the launcher's own shapes. Fields are renamed, never
// interpreted; an entry without its required fields is left out rather than
// guessed at.
import type { AgentCall } from './guest-exec.js';

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
