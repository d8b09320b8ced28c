// The launcher's view of its one libvirt domain. @unraid/libvirt covers
// define/lookup/info/suspend/resume/destroy/undefine/XML; it has no start flags,
// reset, shutdown modes, guest-agent passthrough or events, so those go
// through virsh on the same private socket. virsh's only failure channel is
// text on stderr: the one libvirt message the launcher must recognise (agent
// not connected) is matched here and nowhere else.
import { execFile, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { DomainState, type Domain, type Hypervisor } from '@unraid/libvirt';
import { UnavailableError } from './errors.js';
import { parseJobStats, type JobStats } from './job-stats.js';

const execFileP = promisify(execFile);

export type DomainStateName = 'absent' | 'nostate' | 'running' | 'blocked' | 'paused' | 'shutdown' | 'shutoff' | 'crashed' | 'pmsuspended';

const STATE_NAMES: Record<DomainState, DomainStateName> = {
  [DomainState.NOSTATE]: 'nostate',
  [DomainState.RUNNING]: 'running',
  [DomainState.BLOCKED]: 'blocked',
  [DomainState.PAUSED]: 'paused',
  [DomainState.SHUTDOWN]: 'shutdown',
  [DomainState.SHUTOFF]: 'shutoff',
  [DomainState.CRASHED]: 'crashed',
  [DomainState.PMSUSPENDED]: 'pmsuspended',
};

/** A libvirt lifecycle event as virsh prints it, e.g. {type: 'Stopped', detail: 'Destroyed'}. */
export interface LifecycleEvent {
  type: string;
  detail: string;
}

export interface DomainEvents {
  onLifecycle(e: LifecycleEvent): void;
  /** The guest agent connected or disconnected (re-read agentConnected for which). */
  onAgentLifecycle(): void;
  /** The event stream ended: libvirtd is gone (or virsh died). */
  onEnd(err: Error): void;
}

const LIFECYCLE_LINE = /event 'lifecycle' for domain '.*': (\S+)(?: (.*))?$/;

/** The lifecycle event in one line of `virsh event --loop`; undefined for other events. */
export function parseLifecycleLine(line: string): LifecycleEvent | undefined {
  const m = LIFECYCLE_LINE.exec(line);
  return m ? { type: m[1]!, detail: m[2] ?? '' } : undefined;
}

const AGENT_LIFECYCLE_LINE = /^event 'agent-lifecycle' for domain /;

export const isAgentLifecycleLine = (line: string): boolean => AGENT_LIFECYCLE_LINE.test(line);

/** Whether live domain XML shows the guest agent's channel opened by the guest (libvirt adds state='connected'). */
export function agentChannelConnected(domainXml: string): boolean {
  const target = /<target\b[^>]*\bname=["']org\.qemu\.guest_agent\.0["'][^>]*>/.exec(domainXml)?.[0];
  return target !== undefined && /\bstate=["']connected["']/.test(target);
}

/** Where an outgoing migration goes; the paths are as the source launcher's namespace sees them. */
export interface MigrateOptions {
  /** The target libvirtd, e.g. qemu+unix:///system?socket=/run/libvirt/m/lv. */
  destUri: string;
  memoryUri: string;
  disksUri: string;
  /** Target devs of the disks to copy. */
  disks: string[];
  /** Host path of the destination XML (toTargetXml). */
  destXmlPath: string;
  bandwidthMiBps?: number;
  autoConverge?: boolean;
}

/** How long a virsh command may take before it is killed, in ms. */
export interface VirshTimeouts {
  /** Any command but `start`. */
  commandMs: number;
  /**
   * `virsh start`: libvirtd spawns QEMU and waits for its monitor, which
   * takes far longer when many VMs start at once (100 on 2 TCG cores: over
   * 30 s, density bench 2026-11-28, and virsh killed at 30 s took QEMU with
   * it). Below the agent's 300 s SyncVm deadline, which also covers the disks'
   * preparation: its cause reaches the pod when that took under 120 s.
   */
  startMs: number;
}

export const VIRSH_TIMEOUTS: VirshTimeouts = { commandMs: 30_000, startMs: 180_000 };

export class DomainDriver {
  constructor(
    private readonly hypervisor: Hypervisor,
    private readonly uri: string,
    private readonly timeouts: VirshTimeouts = VIRSH_TIMEOUTS,
  ) {}

  /** The daemon's libvirt version, e.g. "9.0.0". */
  async version(): Promise<string> {
    const out = await this.virsh(['version', '--daemon']);
    return /Running against daemon: (\S+)/.exec(out)?.[1] ?? 'unknown';
  }

  /**
   * The domain, or undefined when libvirt has none with this uuid. Found by
   * listing: @unraid/libvirt drops libvirt's error codes, so "not found"
   * cannot be told from other lookup failures.
   */
  async lookup(uuid: string): Promise<Domain | undefined> {
    for (const dom of await this.hypervisor.connectListAllDomains()) {
      if ((await this.hypervisor.domainGetUUIDString(dom)) === uuid) return dom;
    }
    return undefined;
  }

  async state(uuid: string): Promise<DomainStateName> {
    const dom = await this.lookup(uuid);
    if (!dom) return 'absent';
    try {
      return STATE_NAMES[(await this.hypervisor.domainGetInfo(dom)).state] ?? 'nostate';
    } catch (err) {
      // Undefined between lookup and info.
      if (!(await this.lookup(uuid))) return 'absent';
      throw err;
    }
  }

  async define(xml: string): Promise<void> {
    await this.hypervisor.domainDefineXML(xml);
  }

  /** Starts with vCPUs stopped, so the console is attached before the guest prints anything. */
  async startPaused(uuid: string): Promise<void> {
    await this.virsh(['start', '--paused', uuid], this.timeouts.startMs);
  }

  async suspend(uuid: string): Promise<void> {
    await this.hypervisor.domainSuspend(await this.require(uuid));
  }

  async resume(uuid: string): Promise<void> {
    await this.hypervisor.domainResume(await this.require(uuid));
  }

  async reset(uuid: string): Promise<void> {
    await this.virsh(['reset', uuid]);
  }

  /**
   * Asks the guest to reboot: `agent` through the guest agent (guest-shutdown
   * mode reboot), `acpi` by the power button, libvirt then resetting the
   * domain when the guest powers off rather than stopping it.
   */
  async reboot(uuid: string, mode: 'agent' | 'acpi'): Promise<void> {
    await this.virsh(['reboot', '--mode', mode, uuid]);
  }

  /** A disk's size as QEMU has it (`virsh domblkinfo`'s Capacity), by its source path. */
  async diskCapacity(uuid: string, path: string): Promise<number | undefined> {
    const m = /^Capacity:\s+(\d+)$/m.exec(await this.virsh(['domblkinfo', uuid, '--device', path]));
    return m ? Number(m[1]) : undefined;
  }

  /** Tells QEMU the disk at `path` is `sizeBytes` now (QMP block_resize); the guest sees a capacity change. */
  async blockResize(uuid: string, path: string, sizeBytes: number): Promise<void> {
    await this.virsh(['blockresize', uuid, path, '--size', `${sizeBytes}B`]);
  }

  /** ACPI power button only; libvirt's default would use the guest agent when one is connected. */
  async shutdownAcpi(uuid: string): Promise<void> {
    await this.virsh(['shutdown', '--mode', 'acpi', uuid]);
  }

  async destroy(uuid: string): Promise<void> {
    await this.hypervisor.domainDestroy(await this.require(uuid));
  }

  /** Removes the definition; a no-op when there is none. */
  async undefine(uuid: string): Promise<void> {
    const dom = await this.lookup(uuid);
    if (dom) await this.hypervisor.domainUndefine(dom);
  }

  /**
   * Sends one QEMU guest agent command and returns its "return" member.
   * UnavailableError when the agent in the guest is not connected.
   */
  async agentCommand(uuid: string, command: { execute: string; arguments?: unknown }, timeoutS: number): Promise<unknown> {
    const out = await this.virsh(['qemu-agent-command', uuid, JSON.stringify(command), '--timeout', String(timeoutS)]);
    const reply = JSON.parse(out) as { return?: unknown };
    return reply.return;
  }

  /** Whether the guest agent in the guest has its channel open; false when there is no domain. */
  async agentConnected(uuid: string): Promise<boolean> {
    const dom = await this.lookup(uuid);
    return dom ? agentChannelConnected(await this.hypervisor.domainGetXMLDesc(dom)) : false;
  }

  /** The domain's XML as a migration destination takes it: without what libvirt adds at run time. */
  async migratableXml(uuid: string): Promise<string> {
    return this.virsh(['dumpxml', '--migratable', uuid]);
  }

  /**
   * Migrates the domain peer to peer (`virsh migrate`, VIR_MIGRATE_LIVE|PEER2PEER|PERSIST_DEST|PAUSED|NON_SHARED_INC;
   * virsh names PAUSED `--suspend`). Resolves when libvirt confirmed the migration: the domain here is shut off.
   */
  async migrate(uuid: string, o: MigrateOptions): Promise<void> {
    const args = ['migrate', uuid, o.destUri, '--live', '--p2p', '--persistent', '--suspend', '--migrateuri', o.memoryUri];
    if (o.disks.length) args.push('--copy-storage-inc', '--migrate-disks', o.disks.join(','), '--disks-uri', o.disksUri);
    args.push('--xml', o.destXmlPath, '--persistent-xml', o.destXmlPath);
    if (o.bandwidthMiBps) args.push('--bandwidth', String(o.bandwidthMiBps));
    if (o.autoConverge) args.push('--auto-converge');
    await this.virsh(args, 0);
  }

  /** The running job's figures, or the last completed one's; undefined when there is none. */
  async jobStats(uuid: string, completed = false): Promise<JobStats | undefined> {
    return parseJobStats(await this.virsh(['domjobinfo', uuid, '--rawstats', ...(completed ? ['--completed', '--keep-completed'] : [])]));
  }

  async abortJob(uuid: string): Promise<void> {
    await this.virsh(['domjobabort', uuid]);
  }

  async setMaxDowntime(uuid: string, ms: number): Promise<void> {
    await this.virsh(['migrate-setmaxdowntime', uuid, String(ms)]);
  }

  /** QEMU's self-announce (RARP from each NIC's MAC), so switches learn where the guest now is. */
  async announceSelf(uuid: string): Promise<void> {
    const command = { execute: 'announce-self', arguments: { initial: 50, max: 550, rounds: 5, step: 100 } };
    await this.virsh(['qemu-monitor-command', uuid, JSON.stringify(command)]);
  }

  /** Follows libvirt's event stream until stop() or until libvirtd goes away. */
  watch(handlers: DomainEvents): { stop(): void } {
    // virsh follows one event type or all of them; the launcher needs two.
    const child = spawn('virsh', ['-c', this.uri, 'event', '--loop', '--all'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stopped = false;
    let stderr = '';
    child.stderr.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-2000)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const ev = parseLifecycleLine(line);
      if (ev) handlers.onLifecycle(ev);
      else if (isAgentLifecycleLine(line)) handlers.onAgentLifecycle();
    });
    child.on('exit', (code, signal) => {
      if (!stopped) handlers.onEnd(new Error(`libvirt event stream ended (code ${code}, signal ${signal}): ${stderr.trim()}`));
    });
    return {
      stop() {
        stopped = true;
        child.kill();
      },
    };
  }

  private async require(uuid: string): Promise<Domain> {
    const dom = await this.lookup(uuid);
    if (!dom) throw new Error(`domain ${uuid} is not defined`);
    return dom;
  }

  /** `timeoutMs` 0: none (a migration takes as long as its monitor allows). */
  private async virsh(args: string[], timeoutMs = this.timeouts.commandMs): Promise<string> {
    try {
      const { stdout } = await execFileP('virsh', ['-q', '-c', this.uri, ...args], { timeout: timeoutMs });
      return stdout.trim();
    } catch (err) {
      const e = err as { stderr?: string; message: string; killed?: boolean };
      const said = (e.stderr ?? '').replace(/^error: /gm, '').trim();
      // Killed by the timeout, virsh said nothing: name the timeout rather than an empty "Command failed".
      const message = e.killed ? `no answer in ${timeoutMs} ms, killed${said ? `: ${said}` : ''}` : said || e.message;
      if (/guest agent is not (connected|responding)/i.test(message)) throw new UnavailableError(message, { cause: err });
      throw new Error(`virsh ${args[0]}: ${message}`, { cause: err });
    }
  }
}
