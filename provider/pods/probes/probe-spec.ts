// A VM's probes, as the node runs them: from a plain VM pod's container
// (readiness, liveness, startup) or from its VMI (KubeVirt's readiness and
// liveness probes, which add guestAgentPing), with the kubelet's defaults for
// the timing fields.
// tcpSocket and httpGet reach the VM's pod address from the node, as the
// kubelet probes a pod (only it: a probe's host is refused); exec runs through the guest agent, never through the
// guest's network stack.
import type { V1Container, V1Probe } from '@kubernetes/client-node';

export type ProbeAction =
  | { kind: 'tcpSocket'; port: number }
  | { kind: 'httpGet'; port: number; path: string; scheme: 'HTTP' | 'HTTPS'; headers: { name: string; value: string }[] }
  | { kind: 'exec'; command: string[] }
  | { kind: 'guestAgentPing' }
  /** A probe the node cannot run (a named port that does not exist, gRPC): it fails with `message`, as the kubelet's does. */
  | { kind: 'unrunnable'; message: string };

export interface ProbeSpec {
  action: ProbeAction;
  initialDelayMs: number;
  periodMs: number;
  timeoutMs: number;
  successThreshold: number;
  failureThreshold: number;
}

export type ProbeKind = 'readiness' | 'liveness' | 'startup';

/** The probes the node runs. A VMI has no startup probe (KubeVirt's has none). */
export type VmProbes = Partial<Record<ProbeKind, ProbeSpec>>;

/** The fields KubeVirt's and the pod's probes share; KubeVirt adds guestAgentPing. */
export type AnyProbe = V1Probe & { guestAgentPing?: object };

function resolvePort(port: number | string, container: V1Container | undefined): number | string {
  if (typeof port === 'number') return port;
  if (/^\d+$/.test(port)) return Number(port);
  const named = container?.ports?.find((p) => p.name === port)?.containerPort;
  return named ?? `port "${port}" is not one of the container's named ports`;
}

function actionOf(p: AnyProbe, container: V1Container | undefined): ProbeAction {
  const port = (raw: number | string | undefined): number | { message: string } => {
    const resolved = resolvePort(raw ?? '', container);
    if (typeof resolved === 'string') return { message: resolved };
    return resolved >= 1 && resolved <= 65535 ? resolved : { message: `port ${resolved} is not in 1-65535` };
  };
  if (p.exec) return { kind: 'exec', command: p.exec.command ?? [] };
  if (p.guestAgentPing) return { kind: 'guestAgentPing' };
  // The node would connect anywhere a tenant names (the API server, a host-local service): only the VM's own address.
  if (p.tcpSocket?.host || p.httpGet?.host)
    return { kind: 'unrunnable', message: "a VM is probed at its own address only: remove the probe's host" };
  if (p.tcpSocket) {
    const n = port(p.tcpSocket.port as number | string);
    if (typeof n !== 'number') return { kind: 'unrunnable', message: n.message };
    return { kind: 'tcpSocket', port: n };
  }
  if (p.httpGet) {
    const n = port(p.httpGet.port as number | string);
    if (typeof n !== 'number') return { kind: 'unrunnable', message: n.message };
    return {
      kind: 'httpGet',
      port: n,
      path: p.httpGet.path || '/',
      scheme: p.httpGet.scheme === 'HTTPS' ? 'HTTPS' : 'HTTP',
      headers: (p.httpGet.httpHeaders ?? []).map((h) => ({ name: h.name, value: h.value })),
    };
  }
  if (p.grpc) return { kind: 'unrunnable', message: 'gRPC probes are not supported for VMs' };
  return { kind: 'unrunnable', message: 'the probe names no action (exec, httpGet, tcpSocket, guestAgentPing)' };
}

/** One probe with the kubelet's defaults: every 10 s, 1 s timeout, 1 success, 3 failures. Pure. */
export function probeSpecOf(p: AnyProbe, container?: V1Container): ProbeSpec {
  return {
    action: actionOf(p, container),
    initialDelayMs: (p.initialDelaySeconds ?? 0) * 1000,
    periodMs: (p.periodSeconds || 10) * 1000,
    timeoutMs: (p.timeoutSeconds || 1) * 1000,
    successThreshold: p.successThreshold || 1,
    failureThreshold: p.failureThreshold || 3,
  };
}

/** The probes of a VM: its VMI's when it has one (`vmiSpec`), else its pod's container's. Pure. */
export function probesOf(container: V1Container | undefined, vmiSpec?: { readinessProbe?: AnyProbe; livenessProbe?: AnyProbe }): VmProbes {
  const given: Partial<Record<ProbeKind, AnyProbe | undefined>> = vmiSpec
    ? { readiness: vmiSpec.readinessProbe, liveness: vmiSpec.livenessProbe }
    : { readiness: container?.readinessProbe, liveness: container?.livenessProbe, startup: container?.startupProbe };
  const probes: VmProbes = {};
  for (const [kind, probe] of Object.entries(given) as [ProbeKind, AnyProbe | undefined][])
    if (probe) probes[kind] = probeSpecOf(probe, container);
  return probes;
}
