// DHCP for guests, by Debian's dnsmasq (DNS off): one instance on the node
// bridge answers the VMs that hold pod addresses (bridge binding), one per
// masquerade VM answers inside its namespace. Instances run detached, so VMs
// keep their leases while the agent restarts; the pid file and the config
// path on the command line let the next agent find, keep or replace them.
import { readdirSync, readFileSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { run } from './host.js';
import type { GuestDns } from './resolver.js';

export const DNSMASQ = '/usr/sbin/dnsmasq';

export interface DnsmasqInstance {
  /** Its configuration; the instance is identified by this path. */
  confFile: string;
  pidFile: string;
  /** Network namespace to run in; the host's when absent. */
  netns?: string;
}

export interface DhcpConfig {
  interface: string;
  /** Network address and mask of the range answered (static leases only). */
  network: string;
  netmask: string;
  router: string;
  dnsServers: string[];
  /** DNS search domains (option 119). */
  searches?: string[];
  /** Directory of `mac,ip` files, re-read by dnsmasq on change (inotify). */
  hostsDir?: string;
  /** Directory of per-VM option files (`tag:T,option:…`), re-read by dnsmasq on change (inotify). */
  optsDir?: string;
  /** Fixed `mac,ip` leases. */
  hosts?: string[];
  /**
   * Other nodes' ranges served on the same interface, each with its own
   * router: VMs that migrated here with their addresses renew them.
   */
  sharedNetworks?: Array<{ network: string; netmask: string; router: string }>;
  leaseTime: string;
  /** Run by dnsmasq on every lease event (dhcp-acks.ts); with leasefile-ro, renewals and expiry changes too. */
  leaseScript?: string;
}

export function renderDnsmasqConf(c: DhcpConfig, pidFile: string): string {
  return [
    '# written by the vkvm node agent',
    `interface=${c.interface}`,
    'except-interface=lo',
    'bind-dynamic',
    // DHCP only: DNS is the host's (handed out below), not this instance's.
    'port=0',
    'leasefile-ro',
    'dhcp-authoritative',
    `dhcp-range=${c.network},static,${c.netmask},${c.leaseTime}`,
    `dhcp-option=option:router,${c.router}`,
    ...(c.sharedNetworks ?? []).flatMap((n) => {
      const tag = `home-${n.network.replace(/\./g, '-')}`;
      return [
        `shared-network=${c.interface},${n.router}`,
        `dhcp-range=set:${tag},${n.network},static,${n.netmask},${c.leaseTime}`,
        `dhcp-option=tag:${tag},option:router,${n.router}`,
      ];
    }),
    ...(c.dnsServers.length ? [`dhcp-option=option:dns-server,${c.dnsServers.join(',')}`] : []),
    ...(c.searches?.length ? [`dhcp-option=option:domain-search,${c.searches.join(',')}`] : []),
    ...(c.hostsDir ? [`dhcp-hostsdir=${c.hostsDir}`] : []),
    ...(c.optsDir ? [`dhcp-optsdir=${c.optsDir}`] : []),
    ...(c.hosts ?? []).map((h) => `dhcp-host=${h}`),
    ...(c.leaseScript ? [`dhcp-script=${c.leaseScript}`] : []),
    `pid-file=${pidFile}`,
    // Beside its config, for an operator asking why a guest got no address.
    `log-facility=${pidFile.replace(/\.pid$/, '.log')}`,
    '',
  ].join('\n');
}

/**
 * A VM's own resolver options, for an options directory: tagged, so they
 * override the instance's defaults for the host entry that sets the tag.
 */
export function renderVmDhcpOptions(tag: string, dns: GuestDns): string {
  return [
    ...(dns.nameservers.length ? [`tag:${tag},option:dns-server,${dns.nameservers.join(',')}`] : []),
    ...(dns.searches.length ? [`tag:${tag},option:domain-search,${dns.searches.join(',')}`] : []),
    '',
  ].join('\n');
}

/** The pid of the instance if it runs with this config. */
export async function runningPid(i: DnsmasqInstance): Promise<number | undefined> {
  const pid = Number((await readFile(i.pidFile, 'utf8').catch(() => '')).trim());
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const argv = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return argv.split('\0').includes(`--conf-file=${i.confFile}`) ? pid : undefined;
}

/** The process name (comm) dnsmasq runs under: its file name, cut as the kernel cuts it. */
const DNSMASQ_COMM = `${path.basename(DNSMASQ).slice(0, 15)}\n`;

/**
 * The pids of the host's dnsmasq processes. Every VM network's start and
 * stop looks, and the host runs several processes per VM: an async read per
 * process cost ~0.15 CPU-ms (115 ms a look with 700 processes, measured),
 * these sync reads of `comm` under a tenth of that, and `comm` (unlike `cmdline`)
 * takes no lock on the process's memory, so no read can stall the loop.
 */
function dnsmasqPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/comm`, 'latin1') === DNSMASQ_COMM) pids.push(Number(name));
    } catch {
      // Exited since the listing.
    }
  }
  return pids;
}

/**
 * The processes running this instance's config (dnsmasq's script helper, a
 * main's child, has the same command line), each with its parent; an exited
 * one (a zombie's command line is empty) is not among them.
 */
async function instanceProcesses(i: DnsmasqInstance, among: readonly number[] = dnsmasqPids()): Promise<Map<number, number>> {
  const want = [DNSMASQ, `--conf-file=${i.confFile}`].join('\0');
  const found = new Map<number, number>();
  for (const pid of among) {
    const argv = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (argv.replace(/\0$/, '') !== want) continue;
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    found.set(pid, Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
  }
  return found;
}

/**
 * The main processes of the instance (a helper goes with its main). The pid
 * file names one; this finds any other left by a start that raced a stop, so
 * the next start or stop ends them too.
 */
const mainsOf = (found: Map<number, number>): number[] => [...found].filter(([, ppid]) => !found.has(ppid)).map(([pid]) => pid);

/**
 * Starts the instance unless it already runs, alone, with exactly `conf`; a
 * changed config replaces it. dnsmasq daemonizes and writes its pid file
 * before the command returns, and reports a bad config or a busy port as an
 * exit code.
 */
export async function ensureDnsmasq(i: DnsmasqInstance, conf: string): Promise<number> {
  const current = await readFile(i.confFile, 'utf8').catch(() => undefined);
  const pid = await runningPid(i);
  const found = await instanceProcesses(i);
  const strays = mainsOf(found).filter((p) => p !== pid);
  if (pid && current === conf && strays.length === 0) return pid;
  await stopProcesses(i, pid, found);
  await writeFile(i.confFile, conf, { mode: 0o600 });
  await run([DNSMASQ, `--conf-file=${i.confFile}`], i.netns ? { netns: i.netns } : {});
  const started = await runningPid(i);
  if (!started) throw new Error(`dnsmasq --conf-file=${i.confFile} exited without a pid file`);
  return started;
}

/** Signals a process that may have exited since it was looked up. */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/**
 * Makes a running instance forget removed hosts files. dnsmasq notices new
 * and changed files in a hosts directory by itself, but keeps the records of
 * deleted ones until SIGHUP, and refuses a later file that reuses their
 * address. It is restarted instead: dnsmasq 2.90 aborts on SIGHUP once a lease
 * exists whose host entry, read from a hosts directory, sets a tag (measured),
 * and every VM's does. Its leases go with it (leasefile-ro keeps them in
 * memory only), the removed VM's too; guests renew theirs from the new
 * instance, their addresses being fixed.
 */
export async function restartDnsmasq(i: DnsmasqInstance): Promise<void> {
  if (!(await runningPid(i))) return;
  await stopDnsmasq(i);
  // A repair may have started it meanwhile, with the same files.
  await run([DNSMASQ, `--conf-file=${i.confFile}`], i.netns ? { netns: i.netns } : {}).catch(async (err: unknown) => {
    if (!(await runningPid(i))) throw err;
  });
}

/** Stops the instance, and any stray of it, and waits until they are gone. Idempotent. */
export async function stopDnsmasq(i: DnsmasqInstance): Promise<void> {
  await stopProcesses(i, await runningPid(i), await instanceProcesses(i));
}

/**
 * SIGTERM to the pid file's process and the instance's mains, then waits
 * (up to 5 s) until every process found is gone, helpers included, and
 * SIGKILLs what is left. Only the found ones are looked at again: a start
 * racing this stop leaves a stray the next look finds.
 */
async function stopProcesses(i: DnsmasqInstance, named: number | undefined, found: Map<number, number>): Promise<void> {
  for (const pid of new Set([...(named ? [named] : []), ...mainsOf(found)])) signal(pid, 'SIGTERM');
  let left = [...new Set([...(named ? [named] : []), ...found.keys()])];
  for (let waitedMs = 0; (left = [...(await instanceProcesses(i, left)).keys()]).length > 0 && waitedMs < 5000; waitedMs += 20)
    await new Promise((r) => setTimeout(r, 20));
  for (const pid of left) signal(pid, 'SIGKILL');
  await rm(i.pidFile, { force: true });
}
