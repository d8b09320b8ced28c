// Thin gRPC adapters over VmManager: decode, delegate, encode. Error kinds
// become status codes here and nowhere else.
import * as grpc from '@grpc/grpc-js';
import { SpecError } from '../vmm/errors.js';
import { InvalidArgumentError, PreconditionError, TimeoutError, UnavailableError } from './errors.js';
import type { MigrationSource } from './migration-source.js';
import type { MigrationTarget } from './migration-target.js';
import { loadLauncherService } from './proto/load.js';
import {
  toWireMigration,
  toWireState,
  type ConsoleMessage,
  type MigrationResponse,
  type MigrationUidRequest,
  type PrepareIncomingRequest,
  type PrepareIncomingResponse,
  type StartMigrationRequest,
  type Empty,
  type GuestExecRequest,
  type GuestExecResponse,
  type GetGuestAgentInfoResponse,
  type InfoResponse,
  type ListGuestFilesystemsResponse,
  type ListGuestUsersResponse,
  type SoftRebootResponse,
  type ResizeDiskRequest,
  type KillRequest,
  type ShutdownRequest,
  type StateResponse,
  type SyncVmRequest,
  type SyncVmResponse,
  type WireSyncAction,
} from './proto/types.js';
import { DEFAULT_GRACE_PERIOD_S, type VmManager } from './vm-manager.js';
import type { VmState } from './state.js';

/** Trailing metadata keys carrying error details as JSON. */
export const SPEC_CAUSES_KEY = 'vkvm-spec-causes';
export const FIELD_PATHS_KEY = 'vkvm-field-paths';

const DEFAULT_GUEST_EXEC_TIMEOUT_S = 60;
/** Console output queued for one attached stream before it is cut off. */
const MAX_CONSOLE_BACKLOG_BYTES = 1024 * 1024;

export function toServiceError(err: unknown): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  if (err instanceof SpecError) {
    metadata.set(SPEC_CAUSES_KEY, JSON.stringify(err.causes));
    const fields = err.causes.map((c) => `${c.path || '(spec)'}: ${c.message}`).join('; ');
    return { code: grpc.status.INVALID_ARGUMENT, details: `invalid VM spec: ${fields}`, metadata };
  }
  if (err instanceof InvalidArgumentError) {
    metadata.set(FIELD_PATHS_KEY, JSON.stringify(err.fieldPaths));
    return { code: grpc.status.INVALID_ARGUMENT, details: err.message, metadata };
  }
  if (err instanceof PreconditionError) {
    metadata.set(FIELD_PATHS_KEY, JSON.stringify(err.fieldPaths));
    return { code: grpc.status.FAILED_PRECONDITION, details: err.message, metadata };
  }
  if (err instanceof UnavailableError) return { code: grpc.status.UNAVAILABLE, details: err.message, metadata };
  if (err instanceof TimeoutError) return { code: grpc.status.DEADLINE_EXCEEDED, details: err.message, metadata };
  return { code: grpc.status.INTERNAL, details: err instanceof Error ? err.message : String(err), metadata };
}

export interface LauncherServerOptions {
  manager: VmManager;
  migration: { source: MigrationSource; target: MigrationTarget };
  info(): Promise<InfoResponse>;
  /** Called once a Shutdown or Kill reply has been handed to gRPC: the launcher should exit. */
  onStopped(): void;
}

export interface LauncherServer {
  server: grpc.Server;
  /** Ends every open WatchEvents and Console stream, so the server can shut down. */
  endStreams(): void;
}

const stateReply = (state: VmState): StateResponse => ({ state: toWireState(state) });

function requireFields(req: object, fields: string[]): void {
  const missing = fields.filter((f) => !(req as Record<string, unknown>)[f]);
  if (missing.length) throw new InvalidArgumentError(`required: ${missing.join(', ')}`, missing);
}

export function createLauncherServer(o: LauncherServerOptions): LauncherServer {
  const { service } = loadLauncherService();
  const streams = new Set<grpc.ServerWritableStream<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>>();
  const m = o.manager;

  const unary =
    <Req, Res>(fn: (req: Req) => Promise<Res>, after?: () => void): grpc.handleUnaryCall<Req, Res> =>
    (call, callback) => {
      fn(call.request).then(
        (res) => {
          callback(null, res);
          after?.();
        },
        (err: unknown) => callback(toServiceError(err)),
      );
    };

  const handlers: grpc.UntypedServiceImplementation = {
    Info: unary<Empty, InfoResponse>(() => o.info()),
    Ping: unary<Empty, Empty>(async () => ({})),
    SyncVm: unary<SyncVmRequest, SyncVmResponse>(async (req) => {
      const { action, state } = await m.sync(req.specJson);
      return { action: `SYNC_ACTION_${action.toUpperCase()}` as WireSyncAction, state: toWireState(state) };
    }),
    Shutdown: unary<ShutdownRequest, StateResponse>(
      async (req) => stateReply(await m.shutdown(req.gracePeriodS || DEFAULT_GRACE_PERIOD_S)),
      o.onStopped,
    ),
    Kill: unary<KillRequest, StateResponse>(
      async (req) => stateReply(await m.kill(req.failureReason ? { reason: req.failureReason, message: req.failureMessage } : undefined)),
      o.onStopped,
    ),
    Pause: unary<Empty, StateResponse>(async () => stateReply(await m.pause())),
    Unpause: unary<Empty, StateResponse>(async () => stateReply(await m.unpause())),
    Reset: unary<Empty, StateResponse>(async () => stateReply(await m.reset())),
    GetState: unary<Empty, StateResponse>(async () => stateReply(m.current)),
    GuestExec: unary<GuestExecRequest, GuestExecResponse>((req) =>
      m.guest.exec({ path: req.path, args: req.args, stdin: req.stdin, timeoutS: req.timeoutS || DEFAULT_GUEST_EXEC_TIMEOUT_S }),
    ),
    ListGuestUsers: unary<Empty, ListGuestUsersResponse>(async () => ({
      users: (await m.guest.users()).map((u) => ({ name: u.name, domain: u.domain ?? '', loginTimeS: u.loginTimeS })),
    })),
    ListGuestFilesystems: unary<Empty, ListGuestFilesystemsResponse>(async () => ({
      filesystems: (await m.guest.filesystems()).map((f) => ({
        ...f,
        disks: f.disks.map((d) => ({ busType: d.busType, serial: d.serial ?? '' })),
      })),
    })),
    GetGuestAgentInfo: unary<Empty, GetGuestAgentInfoResponse>(() => m.guest.agentInfo()),
    SoftReboot: unary<Empty, SoftRebootResponse>(async () => ({ method: await m.softReboot() })),
    ResizeDisk: unary<ResizeDiskRequest, Empty>(async (req) => {
      requireFields(req, ['path']);
      await m.resizeDisk(req.path, req.sizeBytes);
      return {};
    }),

    StartMigration: unary<StartMigrationRequest, MigrationResponse>(async (req) => {
      requireFields(req, ['migrationUid', 'destUri', 'memoryUri', 'disksUri', 'targetPaths']);
      const migration = await o.migration.source.start({
        ...req,
        uid: req.migrationUid,
        targetPaths: req.targetPaths!,
        bandwidthMiBps: req.bandwidthMibPerS,
      });
      return { migration: toWireMigration(migration) };
    }),
    AbortMigration: unary<MigrationUidRequest, MigrationResponse>(async (req) => {
      requireFields(req, ['migrationUid']);
      return { migration: toWireMigration(await o.migration.source.abort(req.migrationUid)) };
    }),
    PrepareIncoming: unary<PrepareIncomingRequest, PrepareIncomingResponse>(async (req) => {
      requireFields(req, ['migrationUid']);
      return { paths: await o.migration.target.prepare(req.migrationUid, req.specJson) };
    }),
    FinishIncoming: unary<MigrationUidRequest, StateResponse>(async (req) => {
      requireFields(req, ['migrationUid']);
      return stateReply(await o.migration.target.finish(req.migrationUid));
    }),
    CancelIncoming: unary<MigrationUidRequest, Empty>(async (req) => {
      requireFields(req, ['migrationUid']);
      await o.migration.target.cancel(req.migrationUid);
      return {};
    }, o.onStopped),

    WatchEvents: (call: grpc.ServerWritableStream<Empty, StateResponse>) => {
      streams.add(call);
      call.write(stateReply(m.current));
      const unwatch = m.watch((s) => call.write(stateReply(s)));
      const done = (): void => {
        unwatch();
        streams.delete(call);
      };
      call.on('cancelled', done);
      call.on('close', done);
    },

    Console: (call: grpc.ServerDuplexStream<ConsoleMessage, ConsoleMessage>) => {
      let attached: ReturnType<VmManager['attachConsole']>;
      let overrun = false;
      try {
        attached = m.attachConsole(
          (data) => {
            if (overrun) return;
            // The console cannot wait for one slow reader (the log and other streams share it):
            // a reader that falls too far behind is cut off rather than buffered without bound.
            if (call.writableLength > MAX_CONSOLE_BACKLOG_BYTES) {
              overrun = true;
              attached.detach();
              call.emit('error', {
                code: grpc.status.RESOURCE_EXHAUSTED,
                details: `console reader fell ${MAX_CONSOLE_BACKLOG_BYTES} bytes behind; detached`,
              });
              return;
            }
            call.write({ data });
          },
          () => call.end(),
        );
      } catch (err) {
        call.emit('error', toServiceError(err));
        return;
      }
      streams.add(call);
      const done = (): void => {
        attached.detach();
        streams.delete(call);
      };
      call.on('data', (msg: ConsoleMessage) => attached.write(msg.data));
      // The client closing its side detaches it; the server side ends with it.
      call.on('end', () => {
        done();
        call.end();
      });
      call.on('cancelled', done);
      call.on('close', done);
    },
  };

  const server = new grpc.Server();
  server.addService(service, handlers);
  return {
    server,
    endStreams() {
      for (const s of streams) s.end();
      streams.clear();
    },
  };
}
