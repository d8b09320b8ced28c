// The few host commands the network plumbing runs: iproute2, iptables,
// nftables, dnsmasq. Each call may run inside a VM's network namespace
// (nsenter), and every failure carries the command and its stderr, so an
// operator can re-run it.
import { execFile } from 'node:child_process';
import { access, readFile, readlink, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** A Linux interface name (IFNAMSIZ: at most 15 characters). */
export const INTERFACE_NAME = /^[A-Za-z0-9_.-]{1,15}$/;

export class HostCommandError extends Error {
  readonly kind = 'HostCommand';
  constructor(
    readonly command: string[],
    readonly stderr: string,
    readonly code: number | string | null,
  ) {
    super(`${command.join(' ')} failed (${code}): ${stderr.trim() || 'no output'}`);
  }
}

/** Runs a command (in the network namespace at `netns`, if given; `input` on its stdin); resolves with stdout. */
export function run(command: string[], opts: { netns?: string; input?: string } = {}): Promise<string> {
  const argv = opts.netns ? ['nsenter', `--net=${opts.netns}`, '--', ...command] : command;
  return new Promise((resolve, reject) => {
    const child = execFile(argv[0]!, argv.slice(1), { maxBuffer: 16 * 2 ** 20 }, (err, stdout, stderr) => {
      if (err) reject(new HostCommandError(argv, String(stderr), (err as NodeJS.ErrnoException).code ?? null));
      else resolve(String(stdout));
    });
    if (opts.input === undefined) return;
    // A command that fails before reading its input closes the pipe: its exit status tells why, not EPIPE.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(opts.input);
  });
}

/** One argument of an `ip -batch` line: the batch is split on whitespace and has no quoting. */
const BATCH_ARG = /^[^\s"'\\#]+$/;

/** The `ip -batch` input for `commands` (pure; throws on an argument the batch format cannot carry). */
export function renderIpBatch(commands: readonly string[][]): string {
  for (const c of commands) {
    const bad = c.find((a) => !BATCH_ARG.test(a));
    if (bad !== undefined) throw new Error(`ip -batch cannot carry the argument ${JSON.stringify(bad)} (in: ${c.join(' ')})`);
  }
  return commands.map((c) => c.join(' ') + '\n').join('');
}

/**
 * Runs iproute2 commands in order in one `ip -batch` process (in the named
 * network namespace with `netns`): one process instead of one per command,
 * which is most of what a VM's network costs. Stops at the first failure,
 * whose line and message the error carries.
 */
export async function ipBatch(commands: readonly string[][], opts: { netns?: string } = {}): Promise<void> {
  if (commands.length === 0) return;
  await run(['ip', ...(opts.netns ? ['-n', opts.netns] : []), '-batch', '-'], { input: renderIpBatch(commands) });
}

/**
 * Runs every command of a removal, going on past failures (`ip -force
 * -batch`); failures matching `gone` (the thing was not there) are fine,
 * any other is thrown with the whole of ip's report.
 */
export async function ipBatchRemoval(commands: readonly string[][], gone: RegExp): Promise<void> {
  if (commands.length === 0) return;
  try {
    await run(['ip', '-force', '-batch', '-'], { input: renderIpBatch(commands) });
  } catch (err) {
    if (!(err instanceof HostCommandError)) throw err;
    // ip reports each failure as its message, then "Command failed -:<line>".
    const failures = err.stderr.split('\n').filter((l) => l.trim() && !/^Command failed /.test(l));
    if (failures.some((l) => !gone.test(l))) throw err;
  }
}

export interface IpLink {
  ifname: string;
  /** The MAC address. */
  address?: string;
  link_type?: string;
  master?: string;
  operstate?: string;
}

/** Links of the host, or of a namespace, by name. */
export async function links(netns?: string): Promise<Map<string, IpLink>> {
  const out = await run(['ip', '-j', 'link', 'show'], netns ? { netns } : {});
  return new Map((JSON.parse(out || '[]') as IpLink[]).map((l) => [l.ifname, l]));
}

/**
 * One link of the host's network namespace as `links()` would list it, read
 * from sysfs without starting a process; undefined when there is none.
 */
export async function hostLink(ifname: string): Promise<IpLink | undefined> {
  if (!INTERFACE_NAME.test(ifname) || ifname === '.' || ifname === '..')
    throw new Error(`${JSON.stringify(ifname)} is not an interface name`);
  const dir = `/sys/class/net/${ifname}`;
  const operstate = await readFile(`${dir}/operstate`, 'utf8').catch(() => undefined);
  if (operstate === undefined) return undefined;
  const master = await readlink(`${dir}/master`).then(
    (target) => path.basename(target),
    () => undefined,
  );
  const address = (await readFile(`${dir}/address`, 'utf8').catch(() => '')).trim();
  return { ifname, operstate: operstate.trim().toUpperCase(), ...(address ? { address } : {}), ...(master ? { master } : {}) };
}

/** IPv4 addresses of a link as "a.b.c.d/len". */
export async function addresses(dev: string, netns?: string): Promise<string[]> {
  const out = await run(['ip', '-j', '-4', 'addr', 'show', 'dev', dev], netns ? { netns } : {});
  const parsed = JSON.parse(out || '[]') as Array<{ addr_info?: Array<{ local: string; prefixlen: number }> }>;
  return parsed.flatMap((l) => (l.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`));
}

/** The device of the host's IPv4 default route, if any. */
export async function defaultRouteDevice(): Promise<string | undefined> {
  const out = await run(['ip', '-j', '-4', 'route', 'show', 'default']);
  return (JSON.parse(out || '[]') as Array<{ dev?: string }>)[0]?.dev;
}

export type IptablesTable = 'filter' | 'nat';

/** Creates `chain` in `table` unless it exists. */
export async function ensureChain(table: IptablesTable, chain: string, netns?: string): Promise<void> {
  const ns = netns ? { netns } : {};
  try {
    await run(['iptables', '-w', '-t', table, '-n', '-L', chain], ns);
  } catch {
    await run(['iptables', '-w', '-t', table, '-N', chain], ns);
  }
}

/**
 * Makes `chain` (ours alone) hold exactly `rules`, in order; rebuilt only when
 * it differs, so a periodic repair never opens a window without them.
 */
export async function ensureChainRules(table: IptablesTable, chain: string, rules: string[][]): Promise<void> {
  await ensureChain(table, chain);
  const current = await run(['iptables', '-w', '-t', table, '-S', chain]);
  const have = current.split('\n').filter((l) => l.startsWith('-A '));
  const want = rules.map((r) => ['-A', chain, ...r].join(' '));
  if (have.length === want.length && have.every((l, i) => l === want[i])) return;
  await run(['iptables', '-w', '-t', table, '-F', chain]);
  for (const r of rules) await run(['iptables', '-w', '-t', table, '-A', chain, ...r]);
}

/** Adds `rule` to `chain` unless it is there (`insert`: at the top, so it runs before rules others add). */
export async function ensureRule(
  table: IptablesTable,
  chain: string,
  rule: string[],
  opts: { netns?: string; insert?: boolean } = {},
): Promise<void> {
  const ns = opts.netns ? { netns: opts.netns } : {};
  try {
    await run(['iptables', '-w', '-t', table, '-C', chain, ...rule], ns);
  } catch {
    await run(['iptables', '-w', '-t', table, opts.insert ? '-I' : '-A', chain, ...(opts.insert ? ['1'] : []), ...rule], ns);
  }
}

/** Removes `rule` from `chain` (every copy); nothing when absent. */
export async function deleteRule(table: IptablesTable, chain: string, rule: string[]): Promise<void> {
  for (;;) {
    try {
      await run(['iptables', '-w', '-t', table, '-D', chain, ...rule]);
    } catch {
      return;
    }
  }
}

/** Flushes and deletes `chain`; nothing when absent. */
export async function deleteChain(table: IptablesTable, chain: string): Promise<void> {
  await run(['iptables', '-w', '-t', table, '-F', chain]).catch(() => undefined);
  await run(['iptables', '-w', '-t', table, '-X', chain]).catch(() => undefined);
}

/** Rules of a chain as `iptables -S` prints them (tests and clean-up checks). */
export async function listRules(table: IptablesTable, chain: string, netns?: string): Promise<string[]> {
  const out = await run(['iptables', '-w', '-t', table, '-S', chain], netns ? { netns } : {}).catch(() => '');
  return out.split('\n').filter((l) => l.startsWith('-A '));
}

/** Writes a sysctl below /proc/sys/net (in the namespace at `netns`, if given). */
export async function setNetSysctl(key: string, value: string, netns?: string): Promise<void> {
  await run(['sysctl', '-q', '-w', `${key}=${value}`], netns ? { netns } : {});
}

/**
 * Stops `dev` taking IPv6 routes and addresses from router advertisements
 * (written below /proc, as a sysctl key cannot hold a name with a dot).
 * Nothing to do where IPv6 is off.
 */
export async function refuseRouterAdvertisements(dev: string): Promise<void> {
  const dir = `/proc/sys/net/ipv6/conf/${dev}`;
  if (
    !(await access(dir).then(
      () => true,
      () => false,
    ))
  )
    return;
  for (const key of ['accept_ra', 'autoconf']) await writeFile(`${dir}/${key}`, '0');
}
