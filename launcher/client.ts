// The node agent's typed client for one launcher. It finds the launcher through
// the state file in the run dir, so it works the same for a launcher the agent
// just spawned and one that survived an agent restart. gRPC status codes come
// back as the same error kinds the launcher raised.
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { SpecError, type SpecCause } from '../vmm/errors.js';
import type { VmSpec } from '../vmm/spec.js';
import type { IncomingPaths } from '../vmm/domain/migration-xml.js';
import { InvalidArgumentError, PreconditionError, TimeoutError, UnavailableError } from './errors.js';
import type { StartMigration } from './migration-source.js';
import type { GuestExecRequest, GuestExecResult } from './guest-exec.js';
import type { GuestAgentInfo, GuestFilesystem, GuestUser } from './guest-queries.js';
import { loadLauncherService } from './proto/load.js';
import {
  fromWireMigration,
  fromWireState,
  type MigrationResponse,
  type PrepareIncomingResponse,
  type ConsoleMessage,
  type GuestExecResponse,
  type GetGuestAgentInfoResponse,
  type InfoResponse,
  type KillRequest,
  type ListGuestFilesystemsResponse,
  type ListGuestUsersResponse,
  type SoftRebootResponse,
  type StateResponse,
  type SyncVmResponse,
} from './proto/types.js';
import { FIELD_PATHS_KEY, SPEC_CAUSES_KEY } from './server.js';
import { isLauncherAlive, readStateFile, STATE_FILE_NAME, type Cause, type MigrationState, type StateFile, type VmState } from './state.js';
import type { RebootMethod, SyncAction } from './vm-manager.js';

/** A guest agent query's deadline: the launcher allows the agent 10 s. */
const GUEST_QUERY_TIMEOUT_MS = 20_000;

/** How a launcher ended, as seen from outside. */
export interface LauncherGone {
  /** LauncherExited: it stopped the VM and exited; LauncherDied: it was killed or crashed (QEMU died with it). */
  reason: 'LauncherExited' | 'LauncherDied';
  message: string;
  /** The launcher's last word, when it exited cleanly. */
  exit?: StateFile['exit'];
}

export class LauncherGoneError extends Error {
  readonly kind = 'LauncherGone';
  constructor(readonly gone: LauncherGone) {
    super(gone.message);
  }
}

function fromServiceError(method: string, err: grpc.ServiceError): Error {
  const meta = (key: string): unknown => {
    const v = err.metadata?.get(key)[0];
    return v === undefined ? undefined : JSON.parse(v.toString());
  };
  switch (err.code) {
    case grpc.status.INVALID_ARGUMENT:
      if (meta(SPEC_CAUSES_KEY) === undefined && meta(FIELD_PATHS_KEY) !== undefined)
        return new InvalidArgumentError(err.details, meta(FIELD_PATHS_KEY) as string[], { cause: err });
      return new SpecError((meta(SPEC_CAUSES_KEY) as SpecCause[] | undefined) ?? [], { cause: err });
    case grpc.status.FAILED_PRECONDITION:
      return new PreconditionError(err.details, (meta(FIELD_PATHS_KEY) as string[] | undefined) ?? [], { cause: err });
    case grpc.status.UNAVAILABLE:
      return new UnavailableError(`${method}: ${err.details}`, { cause: err });
    case grpc.status.DEADLINE_EXCEEDED:
      return new TimeoutError(`${method}: ${err.details}`, { cause: err });
    default:
      return new Error(`launcher ${method}: ${err.details} (${grpc.status[err.code]})`, { cause: err });
  }
}

/** What the state file says about a launcher that no longer answers. */
export async function launcherGone(runDir: string): Promise<LauncherGone | undefined> {
  const state = await readStateFile(path.join(runDir, STATE_FILE_NAME)).catch(() => undefined);
  if (!state) return { reason: 'LauncherDied', message: `no state file in ${runDir}` };
  if (state.exit) {
    return { reason: 'LauncherExited', message: `launcher exited; VM ${state.exit.phase} (${state.exit.reason})`, exit: state.exit };
  }
  if (await isLauncherAlive(state)) return undefined;
  return { reason: 'LauncherDied', message: `launcher pid ${state.pid} died without stopping the VM; QEMU died with it` };
}

type Callback<Res> = (err: grpc.ServiceError | null, res: Res) => void;
type UnaryFn<Req, Res> = (req: Req, options: grpc.CallOptions, cb: Callback<Res>) => grpc.ClientUnaryCall;

export interface WatchHandlers {
  onState(state: VmState): void;
  /** Called once, when the launcher is gone; no more states follow. */
  onGone(gone: LauncherGone): void;
}

export interface ConsoleSession {
  write(data: Buffer): void;
  /** Flow control: stop and restart reading output (the launcher cuts off a reader that lags too far). */
  pause(): void;
  resume(): void;
  /** Detaches; the VM keeps running. */
  close(): void;
}

export class LauncherClient {
  private constructor(
    private readonly client: grpc.Client,
    readonly runDir: string,
    readonly socket: string,
  ) {}

  /** Connects to the launcher recorded in <runDir>/launcher.json; LauncherGoneError when it is not running. */
  static async connect(runDir: string, timeoutMs = 10_000): Promise<LauncherClient> {
    const gone = await launcherGone(runDir);
    if (gone) throw new LauncherGoneError(gone);
    const state = await readStateFile(path.join(runDir, STATE_FILE_NAME));
    const { Client } = loadLauncherService();
    const client = new Client(`unix://${state.socket}`, grpc.credentials.createInsecure());
    await new Promise<void>((resolve, reject) =>
      client.waitForReady(Date.now() + timeoutMs, (err) => {
        if (!err) return resolve();
        client.close();
        reject(new UnavailableError(`launcher at ${state.socket}: ${err.message}`));
      }),
    );
    return new LauncherClient(client, runDir, state.socket);
  }

  close(): void {
    this.client.close();
  }

  info(timeoutMs = 10_000): Promise<InfoResponse> {
    return this.unary('info', {}, timeoutMs);
  }

  async ping(timeoutMs = 5_000): Promise<void> {
    await this.unary('ping', {}, timeoutMs);
  }

  /** Idempotent: see SyncVm in launcher.proto. The deadline covers disk preparation and boot. */
  async syncVm(spec: VmSpec, timeoutMs = 300_000): Promise<{ action: SyncAction; state: VmState }> {
    const res = await this.unary<SyncVmResponse>('syncVm', { specJson: JSON.stringify(spec) }, timeoutMs);
    const action = res.action.replace('SYNC_ACTION_', '');
    return { action: (action.charAt(0) + action.slice(1).toLowerCase()) as SyncAction, state: fromWireState(res.state) };
  }

  shutdown(gracePeriodS: number): Promise<VmState> {
    return this.stateCall('shutdown', { gracePeriodS }, (gracePeriodS + 30) * 1000);
  }

  /** `failure`: the VM is killed because it failed (a liveness probe); its run ends Failed with this cause. */
  kill(failure?: Cause): Promise<VmState> {
    const req: KillRequest = { failureReason: failure?.reason ?? '', failureMessage: failure?.message ?? '' };
    return this.stateCall('kill', req, 30_000);
  }

  pause(): Promise<VmState> {
    return this.stateCall('pause', {}, 30_000);
  }

  unpause(): Promise<VmState> {
    return this.stateCall('unpause', {}, 30_000);
  }

  reset(): Promise<VmState> {
    return this.stateCall('reset', {}, 30_000);
  }

  getState(): Promise<VmState> {
    return this.stateCall('getState', {}, 10_000);
  }

  async guestExec(req: Partial<GuestExecRequest> & { path: string }): Promise<GuestExecResult> {
    const timeoutS = req.timeoutS ?? 60;
    const res = await this.unary<GuestExecResponse>(
      'guestExec',
      { path: req.path, args: req.args ?? [], stdin: req.stdin ?? Buffer.alloc(0), timeoutS },
      (timeoutS + 30) * 1000,
    );
    return res;
  }

  async listGuestUsers(): Promise<GuestUser[]> {
    const res = await this.unary<ListGuestUsersResponse>('listGuestUsers', {}, GUEST_QUERY_TIMEOUT_MS);
    // proto3 strings default to '': no domain.
    return res.users.map((u) => ({ name: u.name, ...(u.domain ? { domain: u.domain } : {}), loginTimeS: u.loginTimeS }));
  }

  async listGuestFilesystems(): Promise<GuestFilesystem[]> {
    const res = await this.unary<ListGuestFilesystemsResponse>('listGuestFilesystems', {}, GUEST_QUERY_TIMEOUT_MS);
    return res.filesystems.map((f) => ({
      ...f,
      disks: f.disks.map((d) => ({ busType: d.busType, ...(d.serial ? { serial: d.serial } : {}) })),
    }));
  }

  getGuestAgentInfo(): Promise<GuestAgentInfo> {
    return this.unary<GetGuestAgentInfoResponse>('getGuestAgentInfo', {}, GUEST_QUERY_TIMEOUT_MS);
  }

  /** See SoftReboot in launcher.proto. */
  async softReboot(): Promise<RebootMethod> {
    return (await this.unary<SoftRebootResponse>('softReboot', {}, 60_000)).method;
  }

  /** See ResizeDisk in launcher.proto. */
  async resizeDisk(path: string, sizeBytes: number): Promise<void> {
    await this.unary<Record<string, never>>('resizeDisk', { path, sizeBytes }, 60_000);
  }

  /**
   * Follows the VM's state. The current state comes first. When the stream
   * ends, the state file tells whether the launcher exited or died; a stream
   * that broke while the launcher lives is opened again. Returns cancel.
   */
  watchEvents(handlers: WatchHandlers): () => void {
    let cancelled = false;
    let call: grpc.ClientReadableStream<StateResponse> | undefined;
    let retryTimer: NodeJS.Timeout | undefined;
    let retryDelayMs = 100;
    const stream = (): void => {
      if (cancelled) return;
      const c = (this.client as unknown as { watchEvents(req: object): grpc.ClientReadableStream<StateResponse> }).watchEvents({});
      call = c;
      c.on('data', (msg: StateResponse) => {
        retryDelayMs = 100;
        handlers.onState(fromWireState(msg.state));
      });
      c.on('error', () => {}); // the end of the stream is handled in 'close'
      c.on('close', () => {
        if (cancelled) return;
        void launcherGone(this.runDir).then((gone) => {
          if (cancelled) return;
          if (gone) return handlers.onGone(gone);
          retryTimer = setTimeout(stream, retryDelayMs);
          retryDelayMs = Math.min(retryDelayMs * 2, 5000);
        });
      });
    };
    stream();
    return () => {
      cancelled = true;
      clearTimeout(retryTimer);
      call?.cancel();
    };
  }

  /** Attaches to the serial console. `onEnd` runs when the VM stops or the stream fails. */
  console(onData: (data: Buffer) => void, onEnd: (err?: Error) => void): ConsoleSession {
    const call = (this.client as unknown as { console(): grpc.ClientDuplexStream<ConsoleMessage, ConsoleMessage> }).console();
    let ended = false;
    const end = (err?: Error): void => {
      if (ended) return;
      ended = true;
      onEnd(err);
    };
    call.on('data', (msg: ConsoleMessage) => onData(msg.data));
    call.on('error', (err: grpc.ServiceError) => end(err.code === grpc.status.CANCELLED ? undefined : fromServiceError('console', err)));
    call.on('end', () => end());
    return {
      write: (data) => call.write({ data }),
      pause: () => call.pause(),
      resume: () => call.resume(),
      close: () => {
        call.end();
        call.cancel();
      },
    };
  }

  /** Source: starts the migration (idempotent per uid); progress and outcome follow as VmState.migration. */
  async startMigration(req: StartMigration): Promise<MigrationState> {
    const { uid, bandwidthMiBps, ...rest } = req;
    const wire = { ...rest, migrationUid: uid, bandwidthMibPerS: bandwidthMiBps ?? 0 };
    return fromWireMigration((await this.unary<MigrationResponse>('startMigration', wire, 60_000)).migration);
  }

  /** Source: cancels the job; resolves once the VM runs on the source again. */
  async abortMigration(uid: string): Promise<MigrationState> {
    return fromWireMigration((await this.unary<MigrationResponse>('abortMigration', { migrationUid: uid }, 60_000)).migration);
  }

  /** Target: prepares a fresh launcher to receive `spec`; the paths go to the source's StartMigration. */
  async prepareIncoming(uid: string, spec: VmSpec, timeoutMs = 300_000): Promise<IncomingPaths> {
    const res = await this.unary<PrepareIncomingResponse>(
      'prepareIncoming',
      { migrationUid: uid, specJson: JSON.stringify(spec) },
      timeoutMs,
    );
    return res.paths;
  }

  /** Target: resumes the received VM, once the source reported Migrated. */
  finishIncoming(uid: string): Promise<VmState> {
    return this.stateCall('finishIncoming', { migrationUid: uid }, 60_000);
  }

  /** Target: removes any received VM and what PrepareIncoming made; the launcher exits. */
  async cancelIncoming(uid: string): Promise<void> {
    await this.unary('cancelIncoming', { migrationUid: uid }, 60_000);
  }

  private async stateCall(method: string, req: object, timeoutMs: number): Promise<VmState> {
    return fromWireState((await this.unary<StateResponse>(method, req, timeoutMs)).state);
  }

  private unary<Res>(method: string, req: object, timeoutMs: number): Promise<Res> {
    const fn = (this.client as unknown as Record<string, UnaryFn<object, Res>>)[method]!;
    return new Promise((resolve, reject) => {
      fn.call(this.client, req, { deadline: Date.now() + timeoutMs }, (err, res) =>
        err ? reject(fromServiceError(method, err)) : resolve(res),
      );
    });
  }
}
