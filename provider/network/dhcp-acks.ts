// When each VM's guest last took its address by DHCP: a readiness signal that
// needs nothing in the guest but a DHCP client (provider/pods/guest-up.ts).
//
// dnsmasq runs a script per lease event (--dhcp-script, as root, one at a
// time); it records an exchange with a VM's guest as a file named by the VM's
// uid, whose mtime is when it was ACKed. Why this way:
//  - robust: only what dnsmasq did is recorded. A DHCPACK shows up as "add" (a
//    new lease) or "old" (a lease renewed, or a restarted guest's request for
//    the address it held: with leasefile-ro every expiry change is an "old").
//    Every dnsmasq instance (the node's, each masquerade VM's) tags its host
//    entries `vm-<uid>`, and the event carries the exchange's tags in
//    DNSMASQ_TAGS; the "old" events of a reload (SIGHUP) carry none and set
//    DNSMASQ_DATA_MISSING, so they are not mistaken for a guest's request.
//    (Measured on dnsmasq 2.90; its log has no year and rotates, and this
//    build has no Lua.)
//  - private: the directory and its files are root's, 0700 and 0600.
//  - cheap: one shell, builtins only, per lease event (a boot, a renewal).
//  - it survives an agent restart: the files stay, dnsmasq keeps running, and
//    the agent reads them again; a VM's run compares the time with its start.
// The agent learns of a new file by inotify (fs.watch), which only queues a
// status sync; the status reads the file, so a missed event costs a delay, not
// a wrong answer.
import { watch, type FSWatcher } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { writeAtomic } from '../atomic-file.js';
import type { Logger } from '../log.js';

/** The dnsmasq tag of a VM's host entries; the script takes the uid back from it. */
export const dhcpTagOf = (uid: string): string => `vm-${uid}`;

/** A VM's uid as a file name: Kubernetes UIDs are lowercase hex and dashes. */
const UID = /^[0-9a-z-]{1,64}$/;

/** The lease script for dnsmasq (pure): records a DHCP exchange with a VM's guest in `dir`. */
export function renderDhcpScript(dir: string): string {
  return `#!/bin/sh
# Written by the vkvm node agent (provider/network/dhcp-acks.ts). dnsmasq runs it
# as root on every lease event: $1 the action, $2 the MAC, $3 the address.
# A DHCP exchange with a VM's guest ("add", or "old" with the exchange's tags)
# touches ${dir}/<uid>; its mtime is when the guest was ACKed.
umask 077
set -f
case "$1" in add|old) ;; *) exit 0 ;; esac
[ -z "$DNSMASQ_DATA_MISSING" ] || exit 0
uid=
for tag in $DNSMASQ_TAGS; do
  case "$tag" in vm-*) uid=\${tag#vm-} ;; esac
done
case "$uid" in ''|*[!0-9a-z-]*) exit 0 ;; esac
printf '%s %s %s\\n' "$1" "$2" "$3" > '${dir}'/"$uid"
exit 0
`;
}

export class DhcpAcks {
  /** The lease script dnsmasq instances run. */
  readonly script: string;
  private readonly listeners = new Set<(uid: string) => void>();
  private watcher: FSWatcher | undefined;

  constructor(
    /** Where the records are: private to root. */
    private readonly dir: string,
    scriptDir: string,
    private readonly log: Logger,
  ) {
    if (/['\n]/.test(dir)) throw new Error(`the DHCP records' directory ${JSON.stringify(dir)} cannot be quoted in the lease script`);
    this.script = path.join(scriptDir, 'dhcp-script');
  }

  /** The directory and the script, before a dnsmasq instance names it; then the watch. Idempotent. */
  async ensure(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const script = renderDhcpScript(this.dir);
    if ((await readFile(this.script, 'utf8').catch(() => '')) !== script) await writeAtomic(this.script, script, 0o700);
    this.follow();
  }

  /** When the guest of VM `uid` was last ACKed, Unix ms; undefined when it never was (as far as the records go). */
  async ackedAtUnixMs(uid: string): Promise<number | undefined> {
    if (!UID.test(uid)) return undefined;
    const s = await stat(path.join(this.dir, uid)).catch(() => undefined);
    return s?.mtimeMs;
  }

  /** Calls `listener` with the uid of each VM whose guest was ACKed from now on. */
  onAck(listener: (uid: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The VM is gone from the node: its record too. */
  async forget(uid: string): Promise<void> {
    if (UID.test(uid)) await rm(path.join(this.dir, uid), { force: true });
  }

  /** The VMs with a record. */
  async recorded(): Promise<string[]> {
    return (await readdir(this.dir).catch(() => [] as string[])).filter((name) => UID.test(name));
  }

  close(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  private follow(): void {
    if (this.watcher) return;
    try {
      this.watcher = watch(this.dir, (_event, name) => {
        if (name && UID.test(name)) for (const l of this.listeners) l(name);
      });
    } catch (err) {
      return this.log.warn({ err, dir: this.dir }, 'cannot watch the DHCP records; readiness by DHCP waits for other status changes');
    }
    // Nothing to keep the process up for.
    this.watcher.unref();
    // The directory went (the node's network removed): the next ensure() watches it anew.
    this.watcher.on('error', (err) => {
      this.log.warn({ err, dir: this.dir }, 'the watch of the DHCP records ended');
      this.close();
    });
  }
}
