// Where the VMs of this node's lent addresses run, for the lendings it
// publishes (lending.ts decides; provider/network/moved-address.ts asks). One
// watch per lent address's VMI, field-selected to its name, as the node's own
// VMIs are watched (pods/vmi-source.ts): the node may read that VMI, the
// grant it got when the VMI first ran here stays until the VMI goes
// (controllers/node-vmi-grant.ts). A change calls `onChange`: the network's
// repair, which publishes the lending again.
import type { KubeClients } from '../kube/client.js';
import { ClusterInformer, objectKey } from '../kube/informer.js';
import { CRDS_MISSING_HINT, KubevirtApi, watchPath } from '../kubevirt/client.js';
import { VMI_PLURAL, type VirtualMachineInstance } from '../kubevirt/types.js';
import type { Logger } from '../log.js';
import type { LentLease, LentVmi } from '../network/ipam.js';
import type { LendingSource } from '../network/moved-address.js';
import { lentVmiNode } from './lending.js';

export class LentVmis implements LendingSource {
  private readonly kubevirt: KubevirtApi;
  /** By VMI uid: its watch, and whether its first list is in. */
  private readonly watches = new Map<string, { vmi: LentVmi; informer: ClusterInformer<VirtualMachineInstance>; synced: boolean }>();
  private handler: (() => void) | undefined;
  private stopped = false;

  constructor(
    private readonly clients: KubeClients,
    private readonly log: Logger,
  ) {
    this.kubevirt = new KubevirtApi(clients);
  }

  onChange(handler: () => void): void {
    this.handler = handler;
  }

  /** Watches the VMIs these leases name, and no others. */
  follow(lent: Readonly<Record<string, LentLease>>): void {
    if (this.stopped) return;
    const wanted = new Map(Object.values(lent).flatMap((l) => (l.vmi ? [[l.vmi.uid, l.vmi] as const] : [])));
    for (const [uid, w] of this.watches) {
      if (wanted.has(uid)) continue;
      this.watches.delete(uid);
      void w.informer.stop();
    }
    for (const [uid, vmi] of wanted) {
      if (this.watches.has(uid)) continue;
      const informer = new ClusterInformer<VirtualMachineInstance>({
        clients: this.clients,
        path: watchPath(VMI_PLURAL, vmi.namespace),
        list: () => this.kubevirt.listVmiNamed(vmi.namespace, vmi.name),
        fieldSelector: `metadata.name=${vmi.name}`,
        missingHint: CRDS_MISSING_HINT,
        log: this.log.child({ vmi: objectKey(vmi.namespace, vmi.name) }),
      });
      const w = { vmi, informer, synced: false };
      informer.onChange(() => this.handler?.());
      this.watches.set(uid, w);
      void informer.start().then(() => {
        w.synced = true;
        this.handler?.();
      });
    }
  }

  /** Where the lease's VM runs; undefined until its VMI was read (or for a lease that names none). */
  whereIs(lease: LentLease): string | null | undefined {
    const w = lease.vmi ? this.watches.get(lease.vmi.uid) : undefined;
    if (!w?.synced) return undefined;
    return lentVmiNode(w.informer.get(objectKey(w.vmi.namespace, w.vmi.name)), lease);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.watches.values()].map((w) => w.informer.stop()));
    this.watches.clear();
  }
}
