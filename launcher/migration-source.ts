// The source side of a live migration: StartMigration writes the destination
// XML and runs libvirt's peer-to-peer migration; a monitor polls the job's
// figures, publishes them (at most one a second) and pauses or aborts on the
// progress and completion timeouts (job-stats.ts); AbortMigration cancels the
// job. libvirt's Confirm is the commit: once `virsh migrate` returns, the
// domain here is shut off (reason migrated) and the VM runs only on the
// target. Every failure before that leaves the VM running here.
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { disksToCopy, MigrationXmlError, toTargetXml, type IncomingPaths } from '../vmm/domain/migration-xml.js';
import type { DomainDriver, MigrateOptions } from './domain-driver.js';
import { InvalidArgumentError, PreconditionError } from './errors.js';
import { judgeProgress, startMonitor, type MonitorLimits, type MonitorState } from './job-stats.js';
import type { MigrationState } from './state.js';
import { withDeadline } from './wait.js';

export interface StartMigration extends MonitorLimits, Omit<MigrateOptions, 'disks' | 'destXmlPath'> {
  uid: string;
  /** Target devs to copy; empty: every writable file disk (disksToCopy). */
  migrateDisks: string[];
  targetPaths: IncomingPaths;
  maxDowntimeMs: number;
}

export type SourceDriver = Pick<
  DomainDriver,
  'state' | 'migratableXml' | 'migrate' | 'jobStats' | 'abortJob' | 'suspend' | 'resume' | 'setMaxDowntime'
>;

export interface MigrationSourceOptions {
  driver: SourceDriver;
  /** The running domain's uuid. */
  domainUuid(): string;
  /** Where the destination XML is written (the launcher's run dir). */
  dir: string;
  publish(m: MigrationState): void;
  log: Logger;
  now?: () => number;
  pollMs?: number;
}

const FINAL = new Set<MigrationState['phase']>(['Migrated', 'Failed', 'Aborted']);
/** How long an abort may take before AbortMigration gives up waiting (KubeVirt's guard). */
const ABORT_GUARD_MS = 30_000;
const STATS_EVERY_MS = 1000;
export const DEST_XML_NAME = 'migration-dest.xml';

interface Outgoing {
  state: MigrationState;
  done: Promise<void>;
  abortRequested: boolean;
}

export class MigrationSource {
  private current: Outgoing | undefined;
  private readonly now: () => number;

  constructor(private readonly o: MigrationSourceOptions) {
    this.now = o.now ?? Date.now;
  }

  /** Starts the migration; idempotent per uid (a repeat returns its state). FAILED_PRECONDITION: not running, or another runs. */
  async start(req: StartMigration): Promise<MigrationState> {
    const cur = this.current;
    if (cur?.state.uid === req.uid) return cur.state;
    if (cur && !FINAL.has(cur.state.phase)) throw new PreconditionError(`migration ${cur.state.uid} is under way`);
    if (cur?.state.phase === 'Migrated') throw new PreconditionError('the VM has already migrated away');
    const uuid = this.o.domainUuid();
    const domainState = await this.o.driver.state(uuid);
    if (domainState !== 'running') throw new PreconditionError(`cannot migrate: the VM is ${domainState}`);
    const sourceXml = await this.o.driver.migratableXml(uuid);
    let destXml: string;
    try {
      destXml = toTargetXml(sourceXml, req.targetPaths);
    } catch (err) {
      if (err instanceof MigrationXmlError) throw new InvalidArgumentError(err.message, [`targetPaths.${err.field}`], { cause: err });
      throw err;
    }
    const destXmlPath = path.join(this.o.dir, DEST_XML_NAME);
    await writeFile(destXmlPath, destXml, { mode: 0o600 });
    if (req.maxDowntimeMs) await this.o.driver.setMaxDowntime(uuid, req.maxDowntimeMs);
    const state: MigrationState = { uid: req.uid, role: 'Source', phase: 'Running', reason: '', message: '' };
    const disks = req.migrateDisks.length ? req.migrateDisks : disksToCopy(sourceXml);
    const migrated = this.o.driver.migrate(uuid, { ...req, disks, destXmlPath });
    const out: Outgoing = { state, abortRequested: false, done: Promise.resolve() };
    this.current = out;
    this.set(out, state);
    this.o.log.info({ migration: req.uid, disks, dest: req.destUri }, 'migration started');
    out.done = this.follow(out, uuid, migrated, req);
    return out.state;
  }

  /** Cancels the job and waits until the VM runs here again. Idempotent; FAILED_PRECONDITION once Migrated. */
  async abort(uid: string): Promise<MigrationState> {
    const cur = this.current;
    if (cur?.state.uid !== uid) throw new PreconditionError(`no migration ${uid} here`);
    if (cur.state.phase === 'Migrated') throw new PreconditionError('the migration has committed: the VM runs on the target');
    if (!FINAL.has(cur.state.phase)) {
      cur.abortRequested = true;
      await this.o.driver.abortJob(this.o.domainUuid()).catch((err: unknown) => this.o.log.warn({ err }, 'domjobabort failed'));
    }
    await withDeadline(cur.done, ABORT_GUARD_MS, `aborting migration ${uid}`);
    return cur.state;
  }

  get state(): MigrationState | undefined {
    return this.current?.state;
  }

  /** Polls the job until `virsh migrate` returns, then records how it ended. */
  private async follow(out: Outgoing, uuid: string, migrated: Promise<void>, limits: MonitorLimits): Promise<void> {
    let monitor: MonitorState = startMonitor(this.now());
    let stop: { reason: string; message: string } | undefined;
    let lastStatsAt = -Infinity;
    let finished = false;
    const ended = migrated.then(
      () => undefined,
      (err: unknown) => err as Error,
    );
    void ended.then(() => (finished = true));
    while (!finished) {
      await Promise.race([ended, new Promise((r) => setTimeout(r, this.o.pollMs ?? 500))]);
      if (finished || stop) continue;
      const stats = await this.o.driver.jobStats(uuid).catch(() => undefined);
      const judged = judgeProgress(monitor, stats, this.now(), limits);
      monitor = judged.state;
      const v = judged.verdict;
      if (v.action === 'pause') {
        this.o.log.warn({ migration: out.state.uid }, v.message);
        await this.o.driver.suspend(uuid).catch((err: unknown) => this.o.log.warn({ err }, 'pausing for convergence failed'));
      } else if (v.action === 'abort') {
        stop = { reason: v.reason, message: v.message };
        this.o.log.warn({ migration: out.state.uid, reason: v.reason }, v.message);
        await this.o.driver.abortJob(uuid).catch((err: unknown) => this.o.log.warn({ err }, 'domjobabort failed'));
      } else if (stats && this.now() - lastStatsAt >= STATS_EVERY_MS) {
        lastStatsAt = this.now();
        this.set(out, { ...out.state, stats });
      }
    }
    const err = await ended;
    await rm(path.join(this.o.dir, DEST_XML_NAME), { force: true });
    if (!err) {
      const stats = await this.o.driver.jobStats(uuid, true).catch(() => undefined);
      this.set(out, { ...out.state, phase: 'Migrated', ...(stats ? { stats } : {}) });
      this.o.log.info({ migration: out.state.uid, stats }, 'migrated');
      return;
    }
    // Paused for convergence, the guest would otherwise stay paused here after the failed attempt.
    if (monitor.pausedAtMs !== undefined)
      await this.o.driver.resume(uuid).catch((e: unknown) => this.o.log.error({ err: e }, 'resuming after a failed migration failed'));
    const failed: MigrationState = out.abortRequested
      ? { ...out.state, phase: 'Aborted', reason: 'AbortRequested', message: err.message }
      : { ...out.state, phase: 'Failed', reason: stop?.reason ?? 'MigrationFailed', message: stop?.message ?? err.message };
    this.set(out, failed);
    this.o.log.warn({ migration: out.state.uid, reason: failed.reason, err }, 'migration did not complete; the VM stays here');
  }

  private set(out: Outgoing, state: MigrationState): void {
    out.state = state;
    if (this.current === out) this.o.publish(state);
  }
}
