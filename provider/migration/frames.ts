// The relay's wire format (docs/design/live-migration.md §4). A stream opens
// with one JSON header line naming the migration and what the stream carries;
// the server answers with one reply line (accepted, or refused with a
// reason); then bytes flow. `libvirt`, `memory` and `disk` carry raw bytes;
// `control` carries newline-delimited JSON messages both ways. Pure: parsing
// and encoding only, each error naming the field it is about.

export const RELAY_PROTOCOL_VERSION = 1;
/** A header or reply line, newline excluded. */
export const MAX_HEADER_BYTES = 1024;
/** A control line may carry a file (the seed ISO, the UEFI vars) in base64. */
export const MAX_CONTROL_LINE_BYTES = 16 * 2 ** 20;

export const STREAM_KINDS = ['control', 'libvirt', 'memory', 'disk'] as const;
export type StreamKind = (typeof STREAM_KINDS)[number];

export interface StreamHeader {
  v: typeof RELAY_PROTOCOL_VERSION;
  /** The migration's UID (VirtualMachineInstanceMigration metadata.uid). */
  uid: string;
  kind: StreamKind;
  /** Which stream of its kind, from 0: each NBD connection is one `disk` stream. */
  n: number;
}

/** The server's first line on every stream. */
export type StreamReply = { ok: true } | { ok: false; reason: string };

/** Files that cross on `control` because libvirt does not copy them: the seed ISO (read-only) and the UEFI vars. */
export type PreservedFileRole = 'nvram' | `cloudInit:${string}`;

export type ControlMessage =
  /** source → target, first on a control stream. */
  | { type: 'hello'; uid: string }
  | { type: 'file'; role: PreservedFileRole; content: string }
  /** target → source: prepared; the launcher's paths for the destination XML. */
  | { type: 'ready'; paths: Record<string, unknown> }
  /** source → target: the source domain is gone (migrated); resume yours. */
  | { type: 'commit' }
  /** target → source: resumed. */
  | { type: 'ack' }
  /** Either way, every HEARTBEAT_MS: a peer silent for longer than HEARTBEAT_LOST_MS is gone (control-channel.ts). */
  | { type: 'ping' }
  | { type: 'abort'; reason: string };

export class FrameError extends Error {
  readonly kind = 'FrameError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'FrameError';
  }
}

/** A Kubernetes UID (RFC 4122 text) or any short token of the same alphabet. */
const UID = /^[0-9A-Za-z][0-9A-Za-z-]{0,63}$/;
const ROLE = /^(nvram|cloudInit:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$/;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const MAX_REASON_CHARS = 512;

function jsonObject(line: Buffer | string, maxBytes: number, field: string): Record<string, unknown> {
  const bytes = typeof line === 'string' ? Buffer.byteLength(line) : line.length;
  if (bytes > maxBytes) throw new FrameError(field, `is ${bytes} bytes, more than ${maxBytes}`);
  let value: unknown;
  try {
    value = JSON.parse(line.toString());
  } catch {
    throw new FrameError(field, 'is not JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new FrameError(field, 'is not a JSON object');
  return value as Record<string, unknown>;
}

function text(o: Record<string, unknown>, key: string, field: string, pattern?: RegExp): string {
  const v = o[key];
  if (typeof v !== 'string') throw new FrameError(`${field}.${key}`, `want a string, got ${JSON.stringify(v) ?? 'nothing'}`);
  if (pattern && !pattern.test(v)) throw new FrameError(`${field}.${key}`, `${JSON.stringify(v.slice(0, 80))} is malformed`);
  return v;
}

export function parseHeader(line: Buffer | string): StreamHeader {
  const o = jsonObject(line, MAX_HEADER_BYTES, 'header');
  if (o.v !== RELAY_PROTOCOL_VERSION) throw new FrameError('header.v', `want ${RELAY_PROTOCOL_VERSION}, got ${JSON.stringify(o.v)}`);
  const uid = text(o, 'uid', 'header', UID);
  const kind = o.kind as StreamKind;
  if (!STREAM_KINDS.includes(kind))
    throw new FrameError('header.kind', `want one of ${STREAM_KINDS.join('|')}, got ${JSON.stringify(o.kind)}`);
  const n = o.n;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 0xffff)
    throw new FrameError('header.n', `want an integer in [0, 65535], got ${JSON.stringify(n)}`);
  return { v: RELAY_PROTOCOL_VERSION, uid, kind, n };
}

/** The header line, newline included; refuses what the server would refuse. */
export function encodeHeader(h: Omit<StreamHeader, 'v'>): Buffer {
  const line = JSON.stringify({ v: RELAY_PROTOCOL_VERSION, uid: h.uid, kind: h.kind, n: h.n });
  parseHeader(line);
  return Buffer.from(`${line}\n`);
}

export function parseReply(line: Buffer | string): StreamReply {
  const o = jsonObject(line, MAX_HEADER_BYTES, 'reply');
  if (o.ok === true) return { ok: true };
  if (o.ok !== false) throw new FrameError('reply.ok', `want true or false, got ${JSON.stringify(o.ok)}`);
  return { ok: false, reason: text(o, 'reason', 'reply') };
}

export function encodeReply(r: StreamReply): Buffer {
  const body = r.ok ? { ok: true } : { ok: false, reason: r.reason.slice(0, MAX_REASON_CHARS) };
  return Buffer.from(`${JSON.stringify(body)}\n`);
}

export function parseControl(line: Buffer | string): ControlMessage {
  const o = jsonObject(line, MAX_CONTROL_LINE_BYTES, 'control');
  switch (o.type) {
    case 'hello':
      return { type: 'hello', uid: text(o, 'uid', 'control', UID) };
    case 'file':
      return { type: 'file', role: text(o, 'role', 'control', ROLE) as PreservedFileRole, content: text(o, 'content', 'control', BASE64) };
    case 'ready': {
      const paths = o.paths;
      if (typeof paths !== 'object' || paths === null || Array.isArray(paths))
        throw new FrameError('control.paths', `want an object, got ${JSON.stringify(paths) ?? 'nothing'}`);
      return { type: 'ready', paths: paths as Record<string, unknown> };
    }
    case 'commit':
    case 'ack':
    case 'ping':
      return { type: o.type };
    case 'abort':
      return { type: 'abort', reason: text(o, 'reason', 'control').slice(0, MAX_REASON_CHARS) };
    default:
      throw new FrameError('control.type', `want hello|file|ready|commit|ack|ping|abort, got ${JSON.stringify(o.type) ?? 'nothing'}`);
  }
}

/** One control line, newline included; refuses what the peer would refuse. */
export function encodeControl(m: ControlMessage): Buffer {
  const line = JSON.stringify(m);
  parseControl(line);
  return Buffer.from(`${line}\n`);
}
