// One run of one probe. tcpSocket and httpGet go from the node to the VM's
// pod address (as the kubelet's do, TLS unverified for HTTPS, 200-399 is a
// success); exec and guestAgentPing go to the guest agent through the
// VM's launcher. Every run ends within its timeout.
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import type { ProbeAction } from './probe-spec.js';

/** The guest agent of the VM, through its launcher. */
export interface GuestAgent {
  exec(path: string, args: string[], timeoutS: number): Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }>;
  ping(): Promise<unknown>;
}

export interface ProbeTarget {
  /** The VM's pod address; absent before it has one. */
  podIP?: string;
  guest: GuestAgent;
}

export interface ProbeOutcome {
  ok: boolean;
  /** Why it failed, in the kubelet's words where it has them. */
  message?: string;
}

// As the kubelet's probes identify themselves.
const USER_AGENT = 'kube-probe/1.33';

function withTimeout<T>(p: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${timeoutMs / 1000}s`)), timeoutMs);
  });
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}

function tcp(host: string, port: number, timeoutMs: number): Promise<ProbeOutcome> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs });
    const done = (o: ProbeOutcome) => {
      socket.destroy();
      resolve(o);
    };
    socket.once('connect', () => done({ ok: true }));
    socket.once('timeout', () => done({ ok: false, message: `dial tcp ${host}:${port}: i/o timeout` }));
    socket.once('error', (err: NodeJS.ErrnoException) =>
      done({ ok: false, message: `dial tcp ${host}:${port}: ${err.code ?? err.message}` }),
    );
  });
}

function http(action: Extract<ProbeAction, { kind: 'httpGet' }>, host: string, timeoutMs: number): Promise<ProbeOutcome> {
  const request = action.scheme === 'HTTPS' ? httpsRequest : httpRequest;
  const headers = Object.fromEntries([['User-Agent', USER_AGENT], ...action.headers.map((h) => [h.name, h.value])]);
  return new Promise((resolve) => {
    const req = request(
      { host, port: action.port, path: action.path, method: 'GET', headers, timeout: timeoutMs, rejectUnauthorized: false },
      (res) => {
        res.resume();
        const code = res.statusCode ?? 0;
        resolve(code >= 200 && code < 400 ? { ok: true } : { ok: false, message: `HTTP probe failed with statuscode: ${code}` });
      },
    );
    req.once('timeout', () => req.destroy(new Error('Client.Timeout exceeded while awaiting headers')));
    req.once('error', (err: NodeJS.ErrnoException) =>
      resolve({
        ok: false,
        message: `Get "${action.scheme.toLowerCase()}://${host}:${action.port}${action.path}": ${err.code ?? err.message}`,
      }),
    );
    req.end();
  });
}

async function exec(guest: GuestAgent, command: string[], timeoutMs: number): Promise<ProbeOutcome> {
  const [path, ...args] = command;
  if (!path) return { ok: false, message: 'the exec probe has no command' };
  const r = await withTimeout(guest.exec(path, args, Math.max(1, Math.ceil(timeoutMs / 1000))), timeoutMs, 'command');
  if (r.exitCode === 0) return { ok: true };
  const output = Buffer.concat([r.stdout, r.stderr]).toString('utf8').trim();
  return { ok: false, message: output ? output.slice(0, 1024) : `command ${JSON.stringify(command)} exited with ${r.exitCode}` };
}

/** Runs `action` once against the VM; never throws. */
export async function runProbe(action: ProbeAction, target: ProbeTarget, timeoutMs: number): Promise<ProbeOutcome> {
  try {
    switch (action.kind) {
      case 'unrunnable':
        return { ok: false, message: action.message };
      case 'tcpSocket':
      case 'httpGet': {
        const host = target.podIP;
        if (!host) return { ok: false, message: 'the VM has no pod address yet' };
        return action.kind === 'tcpSocket' ? await tcp(host, action.port, timeoutMs) : await http(action, host, timeoutMs);
      }
      case 'exec':
        return await exec(target.guest, action.command, timeoutMs);
      case 'guestAgentPing':
        await withTimeout(target.guest.ping(), timeoutMs, 'guest agent ping');
        return { ok: true };
    }
  } catch (err) {
    return { ok: false, message: (err as Error).message };
  }
}
