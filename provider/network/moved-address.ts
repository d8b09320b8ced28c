// A live-migrating VM's address (docs/design/live-migration.md §6), the three
// steps the migration sides call. TEMPORARY thin versions, so the node sides
// of live migration run end to end before the address can move: the target
// attaches the VM with an address of its own node (the guest's address
// changes on migration), and the two switch-over steps only log. The real
// bodies (the lent address, /32 routes, proxy ARP, the hosted-pod-ips
// annotation) replace these, with the same signatures
// (/work/notes/s3/net-contract.md).
import type { Logger } from '../log.js';
import type { VmSpec } from '../../vmm/spec.js';
import type { GuestDns } from './resolver.js';

/** Where a migrating VM's address lives: its home node's pod range and gateway. */
export interface LentAddress {
  podIP: string;
  homeCidr: string;
}

/** PodNetwork's attach, whose result attachIncoming returns as it is. */
export interface MovedAddressDeps<R> {
  attach(spec: VmSpec, dns?: GuestDns): Promise<R>;
  log: Logger;
}

/** Target side, before any bytes move: for now an ordinary attach, on an address of this node. Idempotent. */
export function attachIncoming<R>(deps: MovedAddressDeps<R>, spec: VmSpec, lent: LentAddress, dns?: GuestDns): Promise<R> {
  deps.log.debug({ vm: spec.uid, lent }, 'incoming VM attached with an address of this node (the lent address is not kept yet)');
  return deps.attach(spec, dns);
}

/** Target side at commit, before the guest resumes. For now nothing moves. Idempotent. */
export function claimMovedAddress(deps: Pick<MovedAddressDeps<unknown>, 'log'>, uid: string): Promise<void> {
  deps.log.info({ vm: uid }, 'claim of a moved address: nothing to route yet');
  return Promise.resolve();
}

/** Source side after the target's ack (or 2 s). For now nothing moves. Idempotent. */
export function handOverAddress(
  deps: Pick<MovedAddressDeps<unknown>, 'log'>,
  uid: string,
  to: { node: string; address: string },
): Promise<void> {
  deps.log.info({ vm: uid, to }, 'hand-over of a moved address: nothing to route yet');
  return Promise.resolve();
}
