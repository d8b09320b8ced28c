// When density's measurements start, without waiting for every guest to boot:
// 100 TCG guests on 2 cores may not all boot in any useful time (RCU stalls,
// reboots), and neither the agent's idle CPU nor status latency needs them all.
// - the idle window opens once the pods' statuses have been still for a while
//   (the agent has no pod work left), guests still booting or not;
// - power-off is measured on a sample: the first guests whose console shows
//   the boot marker, up to a size, or those booted by a deadline.
// Pure over an injected clock and probes, so the choices are unit-tested.
import { sleep, systemClock, type Clock } from '../../provider/clock.js';

/**
 * Resolves once no pod event has arrived for `quietMs` (`lastEventAt()`,
 * Unix ms, is the latest); returns when that quiet began. Throws after
 * `timeoutMs` of events that keep coming.
 */
export async function untilQuiet(
  lastEventAt: () => number,
  opts: { quietMs: number; timeoutMs: number; signal: AbortSignal },
  clock: Clock = systemClock,
): Promise<number> {
  const deadline = clock.now() + opts.timeoutMs;
  for (;;) {
    const since = lastEventAt();
    const left = since + opts.quietMs - clock.now();
    if (left <= 0) return since;
    if (clock.now() + left > deadline)
      throw new Error(`the pods' statuses did not stay still for ${opts.quietMs} ms within ${opts.timeoutMs} ms (last event at ${since})`);
    await sleep(clock, left, opts.signal);
  }
}

/** What was seen at both ends of the idle window. */
export interface WindowEnd {
  /** Pod watch events so far (every ADDED/MODIFIED/DELETED). */
  podEvents: number;
  /** The launchers' PIDs of the measured VMs. */
  launcherPids: readonly number[];
}

/**
 * Why the window was not idle for the agent, or nothing: a pod event in it is
 * pod work; a launcher that went or came means a VM stopped or started, and a
 * launcher the agent reaps adds the CPU of its whole tree (QEMU's included,
 * through cutime) to the agent's reaped children.
 */
export function idleWindowDisturbances(before: WindowEnd, after: WindowEnd): string[] {
  const out: string[] = [];
  const events = after.podEvents - before.podEvents;
  if (events > 0) out.push(`${events} pod event(s) in the window`);
  const was = new Set(before.launcherPids);
  const is = new Set(after.launcherPids);
  const gone = [...was].filter((p) => !is.has(p));
  const came = [...is].filter((p) => !was.has(p));
  if (gone.length > 0) out.push(`launcher(s) ${gone.join(',')} exited`);
  if (came.length > 0) out.push(`launcher(s) ${came.join(',')} started`);
  return out;
}

/**
 * The first `size` of `names` to boot (`booted(name)` is asked every `pollMs`
 * of those not booted yet), in the order seen; at `timeoutMs` those booted by
 * then, when at least one. Throws when none booted.
 */
export async function bootedSample(
  names: readonly string[],
  booted: (name: string) => Promise<boolean>,
  opts: { size: number; pollMs: number; timeoutMs: number; signal: AbortSignal },
  clock: Clock = systemClock,
): Promise<string[]> {
  const deadline = clock.now() + opts.timeoutMs;
  const sample: string[] = [];
  for (;;) {
    for (const n of names) {
      if (sample.length >= opts.size) return sample;
      if (!sample.includes(n) && (await booted(n))) sample.push(n);
    }
    if (sample.length >= opts.size) return sample;
    if (clock.now() >= deadline) {
      if (sample.length > 0) return sample;
      throw new Error(`none of the ${names.length} guests booted within ${opts.timeoutMs} ms`);
    }
    await sleep(clock, Math.min(opts.pollMs, Math.max(0, deadline - clock.now())), opts.signal);
  }
}
