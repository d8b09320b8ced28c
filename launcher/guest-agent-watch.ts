// Whether the VM's guest agent is connected and, once it is, what it says
// about the guest OS: re-read on every agent event libvirt sends.
import type { Logger } from 'pino';
import type { DomainDriver } from './domain-driver.js';
import { OneAtATime } from './one-at-a-time.js';
import type { GuestOsInfo, VmState } from './state.js';

/**
 * A just-connected guest agent may not answer yet (a guest still booting
 * under TCG can take a minute): it is asked again 1 s, 2 s, 4 s … apart, at
 * most this far apart, for as long as it stays connected, as KubeVirt's agent
 * poller keeps asking.
 */
const OS_INFO_RETRY_MAX_MS = 30_000;
/** Failed tries after which a failure is worth a warning rather than a debug line. */
const OS_INFO_QUIET_ATTEMPTS = 5;
const AGENT_QUERY_TIMEOUT_S = 5;

export interface GuestAgentWatchOptions {
  driver: Pick<DomainDriver, 'agentCommand' | 'agentConnected'>;
  domainUuid(): string;
  /** Whether to look at all: the VM has an agent channel and the launcher is not closing. */
  active(): boolean;
  /** What was last published (the OS info is asked once per connection; the first connection of a run is kept). */
  current(): Pick<VmState, 'guestOsInfo' | 'guestAgentConnectedAtUnixMs'>;
  publish(next: Pick<Partial<VmState>, 'guestAgentConnected' | 'guestAgentConnectedAtUnixMs' | 'guestOsInfo'>): void;
  log: Logger;
}

export class GuestAgentWatch {
  private readonly refreshes = new OneAtATime();
  private osInfoAttempts = 0;
  private osInfoRetry: NodeJS.Timeout | undefined;

  constructor(private readonly o: GuestAgentWatchOptions) {}

  /**
   * Re-reads whether the guest agent is connected and, once it is, asks it
   * about the guest OS (retried a few times: a guest agent that just opened
   * its channel may not answer yet). Serialized.
   */
  refresh(): Promise<void> {
    return this.refreshes.run(async () => {
      if (!this.o.active()) return;
      // This pass asks anew; a retry still pending would only ask twice.
      clearTimeout(this.osInfoRetry);
      let connected: boolean;
      try {
        connected = await this.o.driver.agentConnected(this.o.domainUuid());
      } catch (err) {
        this.o.log.warn({ err }, 'reading the guest agent channel state failed');
        return;
      }
      if (!connected) {
        this.osInfoAttempts = 0;
        return this.o.publish({ guestAgentConnected: false, guestOsInfo: undefined });
      }
      // The run's first connection: the guest OS is up (the node agent's readiness reads it), whatever follows.
      this.o.publish({
        guestAgentConnected: true,
        guestAgentConnectedAtUnixMs: this.o.current().guestAgentConnectedAtUnixMs || Date.now(),
      });
      if (this.o.current().guestOsInfo) return;
      try {
        const reply = await this.o.driver.agentCommand(this.o.domainUuid(), { execute: 'guest-get-osinfo' }, AGENT_QUERY_TIMEOUT_S);
        this.o.publish({ guestOsInfo: osInfoFromAgent(reply) });
      } catch (err) {
        const attempt = this.osInfoAttempts++;
        if (attempt === OS_INFO_QUIET_ATTEMPTS) this.o.log.warn({ err }, 'the guest agent does not report the guest OS yet; still asking');
        else this.o.log.debug({ err }, 'guest-get-osinfo failed; asking again');
        this.osInfoRetry = setTimeout(() => void this.refresh(), Math.min(1000 * 2 ** attempt, OS_INFO_RETRY_MAX_MS));
      }
    });
  }

  stop(): void {
    clearTimeout(this.osInfoRetry);
  }
}

/** guest-get-osinfo's reply (kebab-case keys) as GuestOsInfo; unknown and empty fields are left out. */
function osInfoFromAgent(reply: unknown): GuestOsInfo {
  const r = (reply ?? {}) as Record<string, unknown>;
  const fields: [keyof GuestOsInfo, string][] = [
    ['name', 'name'],
    ['id', 'id'],
    ['prettyName', 'pretty-name'],
    ['version', 'version'],
    ['versionId', 'version-id'],
    ['kernelRelease', 'kernel-release'],
    ['kernelVersion', 'kernel-version'],
    ['machine', 'machine'],
  ];
  return Object.fromEntries(fields.flatMap(([to, from]) => (typeof r[from] === 'string' && r[from] ? [[to, r[from]]] : [])));
}
