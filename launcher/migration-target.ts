// The target side of a live migration. PrepareIncoming makes the host side of
// the VM ready (limits, QEMU's socket dir, its disks pre-created empty or as
// overlays on the same base, the socket dir QEMU listens in for memory and
// NBD) and defines nothing: libvirt creates the domain from the source's
// destination XML and leaves it paused. FinishIncoming resumes and announces
// it, only once the source committed; CancelIncoming removes it all.
import { chown, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { IncomingPaths } from '../vmm/domain/migration-xml.js';
import { domainUuidOf, type VmSpec } from '../vmm/spec.js';
import type { DomainDriver } from './domain-driver.js';
import { PreconditionError } from './errors.js';
import { parseSpec } from './spec-parse.js';
import type { MigrationState, VmState } from './state.js';
import type { VmManager } from './vm-manager.js';
import type { Vmm } from './vm-manager-deps.js';

/** The directory, in the launcher's private libvirt run dir, where the target QEMU listens (mem, nbd): /run/libvirt/m inside. */
export const MIGRATION_SOCKET_DIR = 'm';

export interface MigrationTargetOptions {
  /** The VM's uid. */
  uid: string;
  manager: Pick<VmManager, 'prepareIncoming' | 'finishIncoming' | 'setMigration'>;
  driver: Pick<DomainDriver, 'state' | 'destroy' | 'undefine' | 'announceSelf'>;
  vmm: Pick<Vmm, 'validate' | 'removeDisks'>;
  /** Host path of the private libvirt run dir (/run/libvirt in the launcher's namespace). */
  libvirtRunDir: string;
  qemuUser: { uid: number; gid: number };
  log: Logger;
}

interface Incoming {
  spec: VmSpec;
  paths: IncomingPaths;
  state: MigrationState;
}

export class MigrationTarget {
  private incoming: Incoming | undefined;

  constructor(private readonly o: MigrationTargetOptions) {}

  private get socketDir(): string {
    return path.join(this.o.libvirtRunDir, MIGRATION_SOCKET_DIR);
  }

  /** Idempotent per uid. FAILED_PRECONDITION: prepared for another migration, or this launcher already ran its VM. */
  async prepare(uid: string, specJson: string): Promise<IncomingPaths> {
    const spec = parseSpec(specJson, this.o.uid, this.o.vmm);
    if (this.incoming) {
      if (this.incoming.state.uid !== uid) throw new PreconditionError(`prepared for migration ${this.incoming.state.uid}`);
      return this.incoming.paths;
    }
    const { onHost, runtime } = await this.o.manager.prepareIncoming(spec);
    // QEMU itself listens here for the memory stream and serves the disks over NBD.
    await mkdir(this.socketDir, { recursive: true, mode: 0o700 });
    await chown(this.socketDir, this.o.qemuUser.uid, this.o.qemuUser.gid);
    const paths: IncomingPaths = {
      diskPaths: Object.fromEntries(Object.entries(runtime.disks).map(([name, d]) => [name, d.path])),
      consoleSocket: runtime.consoleSocketPath,
      agentSocket: runtime.guestAgentSocketPath ?? '',
      vncSocket: runtime.vncSocketPath ?? '',
      nvramPath: '',
      bootPaths: onHost.kernelBoot
        ? { kernel: onHost.kernelBoot.kernelPath, ...(onHost.kernelBoot.initrdPath ? { initrd: onHost.kernelBoot.initrdPath } : {}) }
        : {},
    };
    this.incoming = { spec, paths, state: { uid, role: 'Target', phase: 'Prepared', reason: '', message: '' } };
    this.publish(this.incoming.state);
    this.o.log.info({ migration: uid }, 'prepared for an incoming migration');
    return paths;
  }

  /** Resumes and announces the received domain. Idempotent once resumed. FAILED_PRECONDITION: nothing received. */
  async finish(uid: string): Promise<VmState> {
    const inc = this.require(uid);
    const domainState = await this.o.driver.state(domainUuidOf(inc.spec));
    if (domainState === 'absent') throw new PreconditionError(`migration ${uid}: no domain has been received`);
    if (inc.state.phase !== 'Resumed') this.publish({ ...inc.state, phase: 'ReceivedPaused' });
    const t0 = performance.now();
    const vm = await this.o.manager.finishIncoming(inc.spec);
    if (inc.state.phase !== 'Resumed') {
      this.publish({ ...inc.state, phase: 'Resumed' });
      this.o.log.info({ migration: uid, resumeMs: Math.round(performance.now() - t0) }, 'incoming VM resumed');
      // The guest was paused when QEMU's own announce ran; without this, switches learn the new port only when it talks.
      // Not awaited: the guest runs already, and the agent's commit (the source's hand-over of the address) need not wait.
      void this.o.driver.announceSelf(domainUuidOf(inc.spec)).catch((err: unknown) => this.o.log.warn({ err }, 'announce-self failed'));
    }
    return vm;
  }

  /** Destroys any received domain and removes what prepare made. Idempotent. FAILED_PRECONDITION once resumed here. */
  async cancel(uid: string): Promise<void> {
    const inc = this.incoming;
    if (!inc) return;
    if (inc.state.uid !== uid) throw new PreconditionError(`prepared for migration ${inc.state.uid}, not ${uid}`);
    if (inc.state.phase === 'Resumed') throw new PreconditionError('the VM already runs here; stop it instead');
    const uuid = domainUuidOf(inc.spec);
    const s = await this.o.driver.state(uuid);
    if (s !== 'absent' && s !== 'shutoff') await this.o.driver.destroy(uuid);
    await this.o.driver.undefine(uuid);
    await this.o.vmm.removeDisks(inc.spec);
    await rm(this.socketDir, { recursive: true, force: true });
    this.publish({ ...inc.state, phase: 'Failed', reason: 'Canceled', message: 'the incoming migration was canceled' });
    this.o.log.info({ migration: uid }, 'incoming migration canceled');
  }

  private require(uid: string): Incoming {
    if (this.incoming?.state.uid !== uid) throw new PreconditionError(`no incoming migration ${uid} was prepared here`);
    return this.incoming;
  }

  private publish(state: MigrationState): void {
    this.incoming!.state = state;
    this.o.manager.setMigration(state);
  }
}
