// Which node a home node lends an address of its range to (docs/networking.md,
// "Who may route a moved address"): the node its VM runs on, as the VMI says.
// The home node trusts only what nodes cannot forge about another node's VM:
// its own hand-over (it saw the commit itself) and the VMI's status.nodeName
// and migrationState, which the controllers write (a node may write status
// only of the VMIs on it, and never move one: deploy/node-restriction.yaml).
// A chain move H→B→C thus ends with H lending to C once the controllers copy
// the commit into the VMI; a move back home ends the lending at the claim
// (the lease becomes an ordinary one), and a failed move changes nothing.
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import type { LentLease } from '../network/ipam.js';

/**
 * Where the VM of a lent address runs now (pure); null when it runs nowhere
 * (its VMI is gone, replaced or finished). While a migration is under way
 * and not committed, the node the lease names stays when it is the source or
 * the target: the home node that handed the address over saw the commit
 * before the controllers did.
 */
export function lentVmiNode(vmi: VirtualMachineInstance | undefined, lease: LentLease): string | null {
  if (!vmi || !lease.vmi || vmi.metadata.uid !== lease.vmi.uid) return null;
  if (vmi.status?.phase === 'Succeeded' || vmi.status?.phase === 'Failed') return null;
  const m = vmi.status?.migrationState;
  if (m?.targetNode && !m.failed) {
    if (m.completed || m.endTimestamp) return m.targetNode;
    if (lease.node === m.targetNode || lease.node === m.sourceNode) return lease.node;
  }
  return vmi.status?.nodeName ?? lease.node;
}
