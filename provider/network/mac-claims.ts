// One VM per MAC on the node bridge. The port filter lets out exactly a VM's
// MAC, so a second VM with the same MAC (any namespace may pick any
// macAddress) would teach the bridge to send the first one's frames to it and
// pass the DHCP chaddr rule for the first one's lease. A VM is refused its
// attach while another holds its MAC, before anything is made for it.
// Who holds what comes from the VMs' port records, which outlive the agent,
// plus the claims of attaches under way in this process, which have none yet.
import { SpecError } from '../../vmm/errors.js';

/** A MAC on the bridge and the VM (uid) whose port it is. */
export interface MacHolder {
  uid: string;
  mac: string;
}

export class MacClaims {
  /** Claims this process made (uid → MAC) and has not released: their port records may not exist yet. */
  private readonly claimed = new Map<string, string>();

  /**
   * `recorded`: the MACs of the VMs' port records now. `reserved`: MACs no VM
   * may take, with what holds them (the bridge's own).
   */
  constructor(
    private readonly recorded: () => Promise<MacHolder[]>,
    private readonly reserved: () => Promise<Map<string, string>>,
  ) {}

  /**
   * Claims `mac` for `uid`, or throws a SpecError at `path` when another VM
   * holds it. Idempotent for the VM holding it. The other VM is not named: it
   * may be another tenant's.
   */
  async claim(uid: string, mac: string, path: string): Promise<void> {
    // Held since its last claim: nobody could take it meanwhile, and a running VM's every sync reads no records.
    if (this.claimed.get(uid) === mac) return;
    const [recorded, reserved] = await Promise.all([this.recorded(), this.reserved()]);
    // From here to the set, no await: a concurrent claim sees this one.
    // A VM whose port was built with the MAC keeps it (two built before this check existed both run on).
    const built = recorded.some((h) => h.uid === uid && h.mac === mac);
    const held = recorded.some((h) => h.uid !== uid && h.mac === mac) || [...this.claimed].some(([other, m]) => other !== uid && m === mac);
    const taken = reserved.get(mac) ?? (!built && held ? 'another VM on this node' : undefined);
    if (taken) {
      throw new SpecError([
        {
          path,
          reason: 'FieldValueDuplicate',
          message: `MAC address ${mac} is in use by ${taken}; a MAC must be unique on the node's bridge`,
        },
      ]);
    }
    this.claimed.set(uid, mac);
  }

  /** The VM's network is gone: its MAC is free once its port record is removed too. */
  release(uid: string): void {
    this.claimed.delete(uid);
  }
}
