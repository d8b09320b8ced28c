// Persistent IPAM for the node's pod range. The lease file is the truth: it
// is written (atomically: temp file, fsync, rename, fsync of the directory) before an address is
// handed to anyone, so an agent crash can neither hand one address to two VMs
// nor forget a lease. Addresses are handed out round-robin from after the
// last one, as CNI's host-local IPAM does, so a just-released address is not
// reused at once (a peer may still have it in its ARP cache or connections).
import { readFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { firstVmAddress, intToIp, ipToInt, type Ipv4Range } from './ipv4.js';
import { writeAtomic } from '../atomic-file.js';

interface LeaseFile {
  version: 1;
  cidr: string;
  /** The last address handed out; the next search starts after it. */
  last?: string;
  /** owner (VM uid) → address */
  leases: Record<string, string>;
  /**
   * Leases whose VM migrated to another node with its address (owner → where
   * to): kept, so the address is never handed out while the VM runs there.
   */
  lent?: Record<string, LentLease>;
}

/** Where a lent address's VM went. */
export interface LentLease {
  /** The node it is lent to now (where its VM runs, as far as this node knows). */
  node: string;
  since: string;
  /** The VM's VMI: the record that says where it runs after it moves on (provider/migration/lending.ts). */
  vmi?: LentVmi;
}

/** A VMI, by name and uid (a VMI recreated under the name is another). */
export interface LentVmi {
  namespace: string;
  name: string;
  uid: string;
}

export class RangeExhaustedError extends Error {
  readonly kind = 'RangeExhausted';
}

export class Ipam {
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly file: string,
    private readonly range: Ipv4Range,
    private state: LeaseFile,
  ) {}

  /**
   * Opens the lease file for `range`. A file for another range is taken over
   * only when it holds no lease: a node whose range changed under running VMs
   * is an operator's problem to see, not one to paper over.
   */
  static async open(file: string, range: Ipv4Range): Promise<Ipam> {
    await mkdir(path.dirname(file), { recursive: true, mode: 0o711 });
    let state: LeaseFile = { version: 1, cidr: range.cidr, leases: {} };
    const text = await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined;
      throw err;
    });
    if (text !== undefined) {
      const saved = JSON.parse(text) as LeaseFile;
      if (saved.cidr !== range.cidr && Object.keys(saved.leases).length > 0) {
        throw new Error(
          `${file} holds leases in ${saved.cidr} but the node's pod range is now ${range.cidr}; remove the VMs (or the file) first`,
        );
      }
      if (saved.cidr === range.cidr) state = saved;
    }
    return new Ipam(file, range, state);
  }

  /** The address `owner` holds, if any. */
  addressOf(owner: string): string | undefined {
    return this.state.leases[owner];
  }

  /** owner → address of every lease. */
  leases(): Record<string, string> {
    return { ...this.state.leases };
  }

  /** owner → where to, of every lent lease. */
  lent(): Record<string, LentLease> {
    return { ...this.state.lent };
  }

  /**
   * Marks `owner`'s lease as lent to `node` (its VM moved there with the
   * address, or moved on there), keeping the VMI recorded first. Idempotent.
   */
  lend(owner: string, node: string, now = new Date(), vmi?: LentVmi): Promise<void> {
    return this.serialized(async () => {
      const was = this.state.lent?.[owner];
      if (!(owner in this.state.leases) || (was?.node === node && (was.vmi || !vmi))) return;
      const known = was?.vmi ?? vmi;
      const lease: LentLease = { node, since: was?.node === node ? was.since : now.toISOString(), ...(known ? { vmi: known } : {}) };
      await this.save({ ...this.state, lent: { ...this.state.lent, [owner]: lease } });
    });
  }

  /**
   * Makes `ip` (of this range) `owner`'s ordinary lease, taking it from
   * whoever held it: a VM that migrated back to its home node. Idempotent.
   */
  adopt(owner: string, ip: string): Promise<void> {
    return this.serialized(async () => {
      if (this.state.leases[owner] === ip && !this.state.lent?.[owner]) return;
      const leases = Object.fromEntries(Object.entries(this.state.leases).filter(([o, a]) => a !== ip && o !== owner));
      const lent = Object.fromEntries(Object.entries(this.state.lent ?? {}).filter(([o]) => o in leases));
      await this.save({ ...this.state, leases: { ...leases, [owner]: ip }, lent });
    });
  }

  /** The address of `owner`, leasing one if it has none. Idempotent. */
  lease(owner: string): Promise<string> {
    return this.serialized(async () => {
      const held = this.state.leases[owner];
      if (held) return held;
      const taken = new Set(Object.values(this.state.leases).map(ipToInt));
      const first = firstVmAddress(this.range);
      const count = this.range.broadcast - first;
      const start = this.state.last ? ipToInt(this.state.last) + 1 : first;
      for (let i = 0; i < count; i++) {
        const candidate = first + ((start - first + i + count) % count);
        if (taken.has(candidate)) continue;
        const ip = intToIp(candidate);
        await this.save({ ...this.state, last: ip, leases: { ...this.state.leases, [owner]: ip } });
        return ip;
      }
      throw new RangeExhaustedError(`no free address left in ${this.range.cidr} (${count} addresses, all leased)`);
    });
  }

  /** Releases `owner`'s address. Idempotent. */
  release(owner: string): Promise<void> {
    return this.serialized(async () => {
      if (!(owner in this.state.leases)) return;
      const { [owner]: _released, ...rest } = this.state.leases;
      const { [owner]: _lent, ...stillLent } = this.state.lent ?? {};
      await this.save({ ...this.state, leases: rest, lent: stillLent });
    });
  }

  private serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async save(next: LeaseFile): Promise<void> {
    await writeAtomic(this.file, JSON.stringify(next, null, 1), 0o600, { durable: true });
    this.state = next;
  }
}
