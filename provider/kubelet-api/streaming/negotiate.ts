// Which transport and which remotecommand protocol version an exec/attach
// upgrade request gets, decided the way the kubelet decides it
// (k8s.io/apimachinery httpstream.Handshake and wsstream).
import type { IncomingHttpHeaders } from 'node:http';

/** The header SPDY clients offer versions in (one value per version) and the server answers with. */
export const PROTOCOL_HEADER = 'X-Stream-Protocol-Version';
/** Sent with a 403 when no offered version is supported. */
export const ACCEPTED_PROTOCOLS_HEADER = 'X-Accepted-Stream-Protocol-Versions';

/**
 * Over SPDY, v5 is v4 (its close signal is a WebSocket feature), v4 reports the
 * exit status as a JSON metav1.Status, v3 adds the resize stream and v2 is the
 * first numbered version. v1 ("channel.k8s.io") is left out: no client has
 * offered only v1 since Kubernetes 1.4, and its stream handling differs.
 */
export const SPDY_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io', 'v3.channel.k8s.io', 'v2.channel.k8s.io'] as const;
/** Binary channel protocols only; v5 adds the close signal (channel 255). */
export const WEBSOCKET_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'] as const;

export type StreamProtocol = (typeof SPDY_PROTOCOLS)[number];

/** port-forward over SPDY: one version (the kubelet's PortForwardProtocolV1Name). */
export const PORT_FORWARD_SPDY_PROTOCOLS = ['portforward.k8s.io'] as const;
/**
 * port-forward over WebSocket: binary channels, as exec's v4 (or no
 * subprotocol at all, which the kubelet reads the same way). The kubelet's
 * text variant v4.base64.channel.k8s.io is left out, as for exec.
 */
export const PORT_FORWARD_WEBSOCKET_PROTOCOLS = ['v4.channel.k8s.io'] as const;

export interface ProtocolTraits {
  /** The error stream carries a JSON metav1.Status (v4+); before, a plain-text message on failure only. */
  jsonStatus: boolean;
  /** The client opens a resize stream for a TTY (v3+). */
  resize: boolean;
  /** The client can half-close a WebSocket channel with [255, channel] (v5). */
  closeSignal: boolean;
}

export function protocolTraits(protocol: StreamProtocol): ProtocolTraits {
  const version = Number(protocol[1]);
  return { jsonStatus: version >= 4, resize: version >= 3, closeSignal: version >= 5 };
}

export type Transport = 'spdy' | 'websocket';

/** The transport an upgrade request asks for, if it is an upgrade we serve. */
export function requestedTransport(headers: IncomingHttpHeaders): Transport | undefined {
  const connection = (headers.connection ?? '')
    .toLowerCase()
    .split(',')
    .map((v) => v.trim());
  if (!connection.includes('upgrade')) return undefined;
  const upgrade = (headers.upgrade ?? '').toLowerCase();
  if (upgrade === 'websocket') return 'websocket';
  if (upgrade.split(',').some((v) => v.trim() === 'spdy/3.1')) return 'spdy';
  return undefined;
}

/** Node joins repeated headers with ", "; clients may also list several versions in one value. */
export function offeredProtocols(value: string | string[] | undefined): string[] {
  const values = Array.isArray(value) ? value : value === undefined ? [] : [value];
  return values
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

/**
 * The first offered protocol the server supports. Clients list their best
 * version first, so the client's order decides, as in httpstream.Handshake.
 */
export function negotiate<P extends string>(offered: readonly string[], supported: readonly P[]): P | undefined {
  return offered.find((p): p is P => (supported as readonly string[]).includes(p));
}
