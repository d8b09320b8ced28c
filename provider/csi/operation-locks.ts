// One operation at a time per volume, snapshot or name. CSI's answer to a
// second call while the first runs is ABORTED ("operation pending"), and the
// caller retries; waiting instead would pile up calls behind a slow copy.
import { CsiError } from './errors.js';

export class OperationLocks {
  private readonly busy = new Set<string>();

  async run<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T> {
    const held = keys.filter(Boolean);
    const taken = held.find((k) => this.busy.has(k));
    if (taken) throw new CsiError('ABORTED', `an operation on ${taken} is in progress`);
    for (const k of held) this.busy.add(k);
    try {
      return await fn();
    } finally {
      for (const k of held) this.busy.delete(k);
    }
  }
}
