// QEMU runs unprivileged and opens VM disks below <state dir>/vms: every
// directory on the way there must be searchable by other users (o+x).
import { mkdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { socketPathTooLong } from '../../launcher/agent-api.js';
import type { PreflightCheck } from './checks.js';

/**
 * The first existing directory from `dir` up to / that other users cannot
 * search, if any. Missing ones are skipped: vkvm creates them searchable.
 */
export async function unsearchableDir(dir: string): Promise<string | undefined> {
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    const mode = await stat(d).then(
      (s) => s.mode,
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined;
        throw err;
      },
    );
    if (mode !== undefined && (mode & 0o001) === 0) return d;
    if (d === path.dirname(d)) return undefined;
  }
}

export function unsearchableMessage(dir: string): string {
  return `${dir} is not searchable by other users (mode o+x): QEMU runs unprivileged and could not open VM disks below it; use chmod o+x ${dir} or another --state-dir`;
}

/** A pod UID as long as any (a UUID): the VM directory of each is <vms dir>/<uid>. */
const SOME_POD_UID = '00000000-0000-0000-0000-000000000000';

/** Why VMs could not make their sockets below `vmsDir` (a unix socket path holds 107 bytes), if so. */
export function vmsDirTooLong(vmsDir: string): string | undefined {
  const tooLong = socketPathTooLong(path.join(vmsDir, SOME_POD_UID));
  return (
    tooLong &&
    `${vmsDir} is too long: a VM's sockets below it (${tooLong.slice(vmsDir.length)}) would pass the 107 bytes of a unix socket path; use a shorter --state-dir`
  );
}

export async function vmsDirCheck(vmsDir: string): Promise<PreflightCheck> {
  const long = vmsDirTooLong(vmsDir);
  if (long) return { condition: 'StateDirSearchable', severity: 'hard', ok: false, reason: 'PathTooLong', message: long };
  const blocked = await unsearchableDir(vmsDir);
  return blocked
    ? { condition: 'StateDirSearchable', severity: 'hard', ok: false, reason: 'NotSearchable', message: unsearchableMessage(blocked) }
    : { condition: 'StateDirSearchable', severity: 'hard', ok: true, reason: 'Searchable', message: `QEMU can reach ${vmsDir}` };
}

/**
 * Creates a missing state dir (and missing parents) 0711, as the check above wants it: QEMU passes through
 * to its VM's directory, nobody else lists it. A directory that exists is the operator's and left as it
 * is: the check judges it. Whatever creates directories inside it later (the control plane's 0700 one)
 * must find it there first, or a recursive mkdir would make it with their mode.
 */
export async function makeStateDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o711 });
}
