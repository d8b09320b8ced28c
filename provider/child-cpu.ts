// What the agent's short-lived host commands (ip, nft, dnsmasq, …) cost an
// operation such as a VM's network attach. The kernel adds a child's CPU to
// its parent only when it is reaped, and only as one running total, so the
// total's growth between two moments is split evenly among the operations
// under way in between: exact in sum, approximate per operation when they
// overlap.
import { readFileSync } from 'node:fs';
import { parseProcStat } from './proc-cpu.js';

/** This process's reaped-children CPU in ms; read synchronously (a /proc read does not block), so no two readings interleave. */
function reapedChildrenMs(): number {
  return parseProcStat(readFileSync('/proc/self/stat', 'utf8'))?.reapedChildrenMs ?? 0;
}

export class ChildCpuMeter {
  /** ms each operation under way has been given so far. */
  private readonly open = new Map<symbol, number>();
  private lastTotalMs: number;

  /** `read`: this process's reaped-children CPU in ms (tests pass their own). */
  constructor(private readonly read: () => number = reapedChildrenMs) {
    this.lastTotalMs = read();
  }

  /** Starts measuring one operation; the returned function ends it and returns its share in ms. */
  begin(): () => number {
    this.settle();
    const id = Symbol('operation');
    this.open.set(id, 0);
    return () => {
      this.settle();
      const ms = this.open.get(id) ?? 0;
      this.open.delete(id);
      return ms;
    };
  }

  /** Hands the growth since the last reading to the operations under way. */
  private settle(): void {
    const total = this.read();
    const grown = total - this.lastTotalMs;
    this.lastTotalMs = total;
    if (grown <= 0 || this.open.size === 0) return;
    for (const [id, ms] of this.open) this.open.set(id, ms + grown / this.open.size);
  }
}
