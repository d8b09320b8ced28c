// Keeps the node agent running after `vkvm join`: as the systemd unit
// deploy/vkvm.service where systemd is PID 1, otherwise (containers, these
// CI machines, --no-systemd) as a detached process whose pid file sits in the
// state dir. Both are idempotent: a re-run restarts the agent with the new
// arguments; stopping an agent that is not running does nothing.
import { execFile, spawn } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { processStartTicks } from '../../launcher/agent-api.js';
import { ConfigError } from '../config.js';
import type { Logger } from '../log.js';
import { cliPath, packageRoot } from '../package-root.js';

const execFileP = promisify(execFile);

export type ServiceMode = 'systemd' | 'process';

export const SYSTEMD_UNIT_PATH = '/etc/systemd/system/vkvm.service';
export const SYSTEMD_ENV_PATH = '/etc/vkvm/agent.env';

/** Where the unit goes and which systemctl manages it (tests use a scratch dir and a fake). */
export interface SystemdTarget {
  unitPath: string;
  envPath: string;
  systemctl: string;
}

export const SYSTEMD: SystemdTarget = { unitPath: SYSTEMD_UNIT_PATH, envPath: SYSTEMD_ENV_PATH, systemctl: 'systemctl' };
export const PID_FILE = 'agent.pid';
export const AGENT_LOG = 'agent.log';

export { cliPath };

export async function systemdIsInit(): Promise<boolean> {
  return (await readFile('/proc/1/comm', 'utf8').catch(() => '')).trim() === 'systemd';
}

/** The EnvironmentFile of deploy/vkvm.service. systemd splits VKVM_AGENT_ARGS on whitespace, so no argument may hold any. */
export function renderAgentEnv(nodeBinary: string, cli: string, agentArgs: string[]): string {
  const spaced = agentArgs.find((a) => /\s/.test(a));
  if (spaced)
    throw new ConfigError(
      'agent flags',
      `${JSON.stringify(spaced)} contains whitespace, which the systemd unit cannot pass; use another path or --no-systemd`,
    );
  return [
    '# Written by vkvm join; read by /etc/systemd/system/vkvm.service.',
    `VKVM_NODE=${nodeBinary}`,
    `VKVM_CLI=${cli}`,
    `VKVM_AGENT_ARGS="${agentArgs.join(' ')}"`,
    '',
  ].join('\n');
}

/** Installs (or updates) the unit and its environment, enables it and (re)starts the agent. */
export async function installSystemdService(agentArgs: string[], log: Logger, target: SystemdTarget = SYSTEMD): Promise<void> {
  const systemctl = (...args: string[]) => execFileP(target.systemctl, args);
  const env = renderAgentEnv(process.execPath, cliPath(), agentArgs);
  await mkdir(dirname(target.envPath), { recursive: true, mode: 0o755 });
  await writeFile(target.envPath, env, { mode: 0o600 });
  await copyFile(join(packageRoot(), 'deploy', 'vkvm.service'), target.unitPath);
  await systemctl('daemon-reload');
  await systemctl('enable', 'vkvm.service');
  await systemctl('restart', 'vkvm.service');
  log.info({ unit: target.unitPath }, 'vkvm.service installed and (re)started');
}

export async function removeSystemdService(log: Logger, target: SystemdTarget = SYSTEMD): Promise<void> {
  const systemctl = (...args: string[]) => execFileP(target.systemctl, args);
  await systemctl('disable', '--now', 'vkvm.service').catch((err: Error) =>
    log.warn({ err }, 'systemctl disable --now vkvm.service failed'),
  );
  await rm(target.unitPath, { force: true });
  await rm(target.envPath, { force: true });
  await systemctl('daemon-reload').catch(() => undefined);
}

interface PidFile {
  pid: number;
  /** Tells the agent from a later process that reuses its PID. */
  pidStartTicks: number;
}

async function runningAgent(stateDir: string): Promise<PidFile | undefined> {
  let rec: PidFile;
  try {
    rec = JSON.parse(await readFile(join(stateDir, PID_FILE), 'utf8')) as PidFile;
  } catch {
    return undefined;
  }
  const ticks = await processStartTicks(rec.pid).catch(() => undefined);
  // An agent that exited while its parent (a join) still runs is a zombie: not running.
  const state = await readFile(`/proc/${rec.pid}/stat`, 'utf8').then(
    (st) => st.slice(st.lastIndexOf(')') + 2, st.lastIndexOf(')') + 3),
    () => 'X',
  );
  return ticks === rec.pidStartTicks && state !== 'Z' && state !== 'X' ? rec : undefined;
}

/** SIGTERM, then SIGKILL after `graceMs`; removes the pid file. */
export async function stopDetachedAgent(stateDir: string, log: Logger, graceMs = 30_000): Promise<void> {
  const rec = await runningAgent(stateDir);
  if (rec) {
    process.kill(rec.pid, 'SIGTERM');
    const deadline = Date.now() + graceMs;
    while ((await runningAgent(stateDir)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    if (await runningAgent(stateDir)) {
      log.warn({ pid: rec.pid }, 'agent did not stop in time; killing it');
      process.kill(rec.pid, 'SIGKILL');
    }
    log.info({ pid: rec.pid }, 'stopped the node agent');
  }
  await rm(join(stateDir, PID_FILE), { force: true });
}

/** Starts `vkvm node` detached from this process, output appended to <stateDir>/agent.log. */
export async function startDetachedAgent(stateDir: string, agentArgs: string[], env: NodeJS.ProcessEnv, log: Logger): Promise<number> {
  await stopDetachedAgent(stateDir, log);
  const out = openSync(join(stateDir, AGENT_LOG), 'a', 0o600);
  try {
    // Its own session: the agent survives the shell (and the join) that started it.
    const child = spawn(process.execPath, [cliPath(), 'node', ...agentArgs], { detached: true, stdio: ['ignore', out, out], env });
    const pid = child.pid;
    if (pid === undefined) throw new Error('could not start the node agent');
    child.unref();
    const rec: PidFile = { pid, pidStartTicks: await processStartTicks(pid) };
    await writeFile(join(stateDir, PID_FILE), JSON.stringify(rec) + '\n', { mode: 0o600 });
    log.info({ pid, log: join(stateDir, AGENT_LOG) }, 'started the node agent as a detached process');
    return pid;
  } finally {
    closeSync(out);
  }
}

export async function detachedAgentPid(stateDir: string): Promise<number | undefined> {
  return (await runningAgent(stateDir))?.pid;
}
