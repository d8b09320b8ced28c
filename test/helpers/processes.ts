// Test support: what tests and the bench read from /proc about processes they
// did not necessarily start (QEMU under libvirt, launchers): liveness, command
// lines, and the one QEMU scan they share.
import { readdirSync, readFileSync } from 'node:fs';

function readFileSafe(p: string): string {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}

/** Whether a process runs (a zombie has exited). */
export function isRunning(pid: number): boolean {
  const stat = readFileSafe(`/proc/${pid}/stat`);
  return stat !== '' && !/^\S+ \(.*\) [ZX] /.test(stat);
}

export function argvOf(pid: number): string[] {
  return readFileSafe(`/proc/${pid}/cmdline`).split('\0').filter(Boolean);
}

/** Running processes whose argv matches. */
export function pidsWhere(match: (argv: string[]) => boolean): number[] {
  return readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((pid) => {
      const argv = argvOf(pid);
      return argv.length > 0 && match(argv) && isRunning(pid);
    });
}

/** Running QEMU processes whose argv matches (other tests' VMs may run on this host: match narrowly). */
export function qemuPids(match: (argv: string[]) => boolean): number[] {
  return pidsWhere((argv) => argv[0]!.includes('qemu-system') && match(argv));
}

/** QEMU processes of one VM by the uuid on their command line: a plain pod's UID is its domain uuid (a VMI's is its firmware UUID). */
export const qemuPidsOf = (uuid: string): number[] => qemuPids((argv) => argv.includes(uuid));

/** QEMU processes of the libvirt domains whose name starts with `prefix` (`-name guest=<name>,…`). */
export const qemuPidsOfDomain = (prefix: string): number[] => qemuPids((argv) => argv.some((a) => a.startsWith(`guest=${prefix}`)));
