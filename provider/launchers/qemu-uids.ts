// One uid per VM for its QEMU, so a guest that escapes QEMU holds only its
// own VM's files. The agent is the node's one allocator: the lowest uid not
// held by a VM directory, recorded in that directory, so an agent restart
// (and a restart of the VM) keeps it, and removing the directory frees it.
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Above the ranges /etc/subuid hands out by default (100000 + 65536 per user) on ordinary hosts. */
export const QEMU_UID_BASE = 3_000_000;
/** How many uids one node hands out from its base; nodes on one machine get bases this far apart (vkvm up --nodes). */
export const QEMU_UID_COUNT = 1_000_000;
const FILE = 'qemu-uid';

export class QemuUids {
  private readonly byVm = new Map<string, number>();

  constructor(
    private readonly vmsDir: string,
    private readonly base = QEMU_UID_BASE,
  ) {}

  /** Reads the uid of every VM directory; called before any take(). */
  async load(): Promise<void> {
    const names = await readdir(this.vmsDir).catch(() => []);
    for (const vm of names) {
      const text = await readFile(path.join(this.vmsDir, vm, FILE), 'utf8').catch(() => undefined);
      const uid = Number(text);
      if (text !== undefined && Number.isInteger(uid) && uid >= this.base && uid < this.base + QEMU_UID_COUNT) this.byVm.set(vm, uid);
    }
  }

  /** The VM's uid: the one its directory records, else the lowest free one (picked before any await, so concurrent takes differ). */
  async take(vm: string): Promise<number> {
    const held = this.byVm.get(vm);
    if (held !== undefined) return held;
    const used = new Set(this.byVm.values());
    let uid = this.base;
    while (used.has(uid)) uid++;
    if (uid >= this.base + QEMU_UID_COUNT) throw new Error('no free QEMU uid left on this node');
    this.byVm.set(vm, uid);
    await writeFile(path.join(this.vmsDir, vm, FILE), `${uid}\n`, { mode: 0o600 });
    return uid;
  }

  /** The uid the VM's QEMU runs as, once taken (or loaded from its directory). */
  of(vm: string): number | undefined {
    return this.byVm.get(vm);
  }

  /** The VM's directory is gone: its uid is free again. */
  release(vm: string): void {
    this.byVm.delete(vm);
  }
}
