// Starting and stopping the init process of a simulated host (a vkvm node's
// simulated-host.ts, a container node's container-node.ts): in the host's
// network namespace (`ip netns exec`, a mount namespace of its own too) and
// UTS namespace, its own process group, and SIGTERM if vkvm up dies.
import { spawn } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import type { Logger } from '../log.js';
import type { LocalNode } from './layout.js';
import { removeNodeNetns } from './segment.js';

const STOP_TIMEOUT_MS = 120_000;

export interface StartedHost {
  node: LocalNode;
  exited: Promise<void>;
  terminate(): void;
  kill(): void;
}

/**
 * Passes the init's log lines on to this process's log; resolves true at
 * `readyMessage`, false if it exits first (its log says why).
 */
function untilReady(stream: Readable, readyMessage: string): Promise<boolean> {
  return new Promise((resolve) => {
    const lines = createInterface({ input: stream });
    lines.on('line', (line) => {
      process.stdout.write(`${line}\n`);
      if (line.includes(`"msg":"${readyMessage}"`)) resolve(true);
    });
    lines.once('close', () => resolve(false));
  });
}

/** Starts `script` with `spec` in the node's namespace (made already); resolves once it logs `readyMessage`. */
export async function startHostInit(
  node: LocalNode,
  o: { script: string; spec: unknown; readyMessage: string; signal: AbortSignal },
): Promise<StartedHost> {
  // Its own process group, so a terminal's Ctrl-C reaches only vkvm up, which stops the nodes in order;
  // and it gets SIGTERM (and stops what it runs) if vkvm up is killed.
  const child = spawn(
    'setpriv',
    [
      '--pdeathsig',
      'TERM',
      '--',
      'ip',
      'netns',
      'exec',
      node.netns,
      'unshare',
      '--uts',
      '--',
      process.execPath,
      o.script,
      JSON.stringify(o.spec),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'], detached: true },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const host: StartedHost = {
    node,
    exited,
    terminate: () => void child.kill('SIGTERM'),
    kill: () => void child.kill('SIGKILL'),
  };
  // A stop asked for meanwhile: the init stops what it started, and says it is not ready.
  const onAbort = () => host.terminate();
  o.signal.addEventListener('abort', onAbort, { once: true });
  const ready = await untilReady(child.stdout!, o.readyMessage);
  o.signal.removeEventListener('abort', onAbort);
  if (!ready) {
    await exited;
    await removeNodeNetns(node);
    throw new Error(`node ${node.name} did not start (its log above says why)`);
  }
  return host;
}

/** Stops the init (it stops what it runs), killing it after a while; then removes its namespace and run dir. */
export async function stopHostInit(host: StartedHost, log: Logger): Promise<void> {
  host.terminate();
  const timedOut = await Promise.race([
    host.exited.then(() => false),
    new Promise<boolean>((r) => setTimeout(() => r(true), STOP_TIMEOUT_MS).unref()),
  ]);
  if (timedOut) {
    log.warn({ node: host.node.name }, 'the simulated host did not stop in time; killing it');
    host.kill();
    await host.exited;
  }
  try {
    await removeNodeNetns(host.node);
    // Volatile, as a host's /run is; mounted in its namespace, so removed from here.
    await rm(host.node.runDir, { recursive: true, force: true });
  } catch (err) {
    // The stop goes on to node 1 and the control plane; the next vkvm up replaces the namespace.
    log.warn({ err, node: host.node.name }, 'could not remove the simulated host’s namespace');
  }
}
