// VmManager against a fake libvirt whose answers the test releases one by one,
// so event and call orders that real guests produce only by chance are exact.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import type { VmSpec } from '../vmm/spec.js';
import { testSpec } from '../vmm/testing/specs.js';
import { ConsoleLog } from './console/log-file.js';
import type { CgroupLimits, CpuWeight } from './cgroup.js';
import type { DomainStateName } from './domain-driver.js';
import type { VmState } from './state.js';
import { VmManager, type DomainOps } from './vm-manager.js';

/** One domain in a private libvirtd; QEMU's serial console is a local socket server. */
class FakeLibvirt implements DomainOps {
  domainState: DomainStateName = 'absent';
  /** While set, each state() waits until the test answers it: a libvirt call still under way while others run. */
  holdReads = false;
  private readonly held: (() => void)[] = [];
  private readHeld: (() => void) | undefined;
  private pressPowerButton!: () => void;
  readonly powerButtonPressed = new Promise<void>((resolve) => (this.pressPowerButton = resolve));
  private readonly serial = net.createServer();

  constructor(private readonly consoleSocket: string) {}

  async state(): Promise<DomainStateName> {
    if (this.holdReads) {
      await new Promise<void>((answer) => {
        this.held.push(answer);
        this.readHeld?.();
      });
    }
    return this.domainState;
  }

  /** The oldest held state() call once there is one; calling the result answers it with the state as it is then. */
  async nextRead(): Promise<() => void> {
    while (this.held.length === 0) await new Promise<void>((resolve) => (this.readHeld = resolve));
    return this.held.shift()!;
  }

  async define(): Promise<void> {
    this.domainState = 'shutoff';
  }

  async startPaused(): Promise<void> {
    await new Promise<void>((resolve) => this.serial.listen(this.consoleSocket, resolve));
    this.domainState = 'paused';
  }

  async suspend(): Promise<void> {
    this.domainState = 'paused';
  }

  /** The calls that change the cgroup's CPU weight or run the vCPUs, in order. */
  readonly runLog: string[] = [];
  async resume(): Promise<void> {
    this.runLog.push('resume');
    this.domainState = 'running';
  }

  async reset(): Promise<void> {}

  /** The modes reboot() was asked for, in order. */
  readonly reboots: string[] = [];
  async reboot(_uuid: string, mode: 'agent' | 'acpi'): Promise<void> {
    this.reboots.push(mode);
  }

  async shutdownAcpi(): Promise<void> {
    this.pressPowerButton();
  }

  readonly diskBytes = new Map<string, number>();
  async diskCapacity(_uuid: string, path: string): Promise<number | undefined> {
    return this.diskBytes.get(path);
  }
  async blockResize(_uuid: string, path: string, sizeBytes: number): Promise<void> {
    this.diskBytes.set(path, sizeBytes);
  }

  /** Whether QEMU's process still exists (it has no /proc entry here). */
  qemuRuns = true;

  destroyCalls = 0;
  async destroy(): Promise<void> {
    this.destroyCalls++;
    this.domainState = 'shutoff';
  }

  async undefine(): Promise<void> {
    this.domainState = 'absent';
  }

  /** Whether a guest agent has its channel open; it answers every command with {}. */
  agentUp = false;
  async agentCommand(): Promise<unknown> {
    if (!this.agentUp) throw new Error('no guest agent');
    return {};
  }

  async agentConnected(): Promise<boolean> {
    return this.agentUp;
  }

  close(): void {
    this.serial.close();
  }
}

const weightName = (w: CpuWeight): string => (w === 'default' ? 'default' : `${w.shares} shares`);

/** Lets pending promise callbacks run: the fake does no I/O, so whatever can happen by now has happened. */
const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function setUp(t: Test): { manager: VmManager; libvirt: FakeLibvirt; spec: VmSpec } {
  const dir = mkdtempSync(path.join(tmpdir(), 'vkvm-vmm-'));
  const socketDir = path.join(dir, 'qemu');
  const libvirt = new FakeLibvirt(path.join(socketDir, 'console.sock'));
  const uid = randomUUID();
  const manager = new VmManager({
    uid,
    socketDir,
    emulatorPath: '/usr/bin/qemu-system-x86_64',
    host: { accelerator: 'tcg', reason: 'test', facts: { kvmDeviceUsable: false, hardwareVirtFlag: null } },
    libvirtd: { qemuPid: async () => 4242 },
    driver: libvirt,
    cgroup: {
      setLimits: async (l: CgroupLimits) => void libvirt.runLog.push(`limits at ${weightName(l.cpuWeight)}`),
      setCpuWeight: async (w: CpuWeight) => void libvirt.runLog.push(`weight ${weightName(w)}`),
    },
    consoleLog: new ConsoleLog(dir, 1024 * 1024),
    qemuUser: { uid: process.getuid!(), gid: process.getgid!() },
    vmm: {
      validate: () => null,
      resolveHostFiles: async (spec) => spec,
      prepareDisks: async () => ({}),
      removeDisks: async () => {},
      buildDomainXml: () => '<domain/>',
    },
    log: pino({ level: 'silent' }),
    qemuProcess: { isAlive: async () => libvirt.qemuRuns, startTicksOf: async () => 1 },
  });
  t.teardown(async () => {
    libvirt.close();
    await rm(dir, { recursive: true, force: true });
  });
  const spec = testSpec({ uid, name: 'vm-manager-test', memoryMiB: 64 });
  return { manager, libvirt, spec };
}

t.test('the launcher exiting while a refresh still reads the domain leaves the final state Succeeded', async (t) => {
  const { manager, libvirt, spec } = setUp(t);
  const published: VmState[] = [];
  manager.watch((s) => published.push(s));
  t.match((await manager.sync(JSON.stringify(spec))).state, { phase: 'Running', reason: 'Booted' });

  const shutdown = manager.shutdown(60);
  await libvirt.powerButtonPressed;
  // The guest powers off: libvirt sends Shutdown, then Stopped, before either refresh has read the domain.
  libvirt.holdReads = true;
  libvirt.domainState = 'shutoff';
  manager.onLifecycle({ type: 'Shutdown', detail: 'Finished after guest request' });
  manager.onLifecycle({ type: 'Stopped', detail: 'Shutdown' });
  (await libvirt.nextRead())();
  t.match(await shutdown, { phase: 'Succeeded', reason: 'GuestShutdown' }, 'the first refresh sees the stop; Shutdown returns');

  // The second refresh's read is under way when the launcher exits (main.ts: Shutdown replied, then close()).
  const secondRefreshRead = await libvirt.nextRead();
  const closed = manager.close();
  (await libvirt.nextRead())(); // close() finds the domain shut off
  await settled(); // and undefines it, or waits for the refresh under way
  secondRefreshRead();
  await closed;
  await settled();

  t.match(manager.current, { phase: 'Succeeded', reason: 'GuestShutdown' }, 'the final state, which main.ts writes as the exit record');
  const started = published.findIndex((s) => s.phase === 'Running');
  t.same(
    published.slice(started).filter((s) => s.phase === 'Pending'),
    [],
    'a VM that ran is never reported Pending again',
  );
});

t.test(
  "a power-off shows once QEMU exits, while libvirt's clean-up holds every read; Shutdown and Kill wait for it, destroy nothing",
  async (t) => {
    const { manager, libvirt, spec } = setUp(t);
    await manager.sync(JSON.stringify(spec));
    let shutdownDone = false;
    const shutdown = manager.shutdown(60).finally(() => (shutdownDone = true));
    await libvirt.powerButtonPressed;
    // libvirt sends Shutdown, kills QEMU and cleans up, answering no read of the domain until it is done.
    libvirt.holdReads = true;
    libvirt.domainState = 'shutdown';
    manager.onLifecycle({ type: 'Shutdown', detail: 'Finished after guest request' });
    const heldRead = await libvirt.nextRead();
    libvirt.qemuRuns = false;
    while (manager.current.phase === 'Running') await new Promise((r) => setTimeout(r, 5));
    const early = { ...manager.current, shutdownDone };
    const kill = manager.kill(); // as the agent does once it sees the run over
    await settled();
    // The clean-up ends: the domain is shut off, the held read answers, Stopped arrives.
    libvirt.domainState = 'shutoff';
    libvirt.holdReads = false;
    heldRead();
    manager.onLifecycle({ type: 'Stopped', detail: 'Shutdown' });
    t.match(
      { early, shutdown: await shutdown, kill: await kill, destroyCalls: libvirt.destroyCalls },
      {
        early: { phase: 'Succeeded', reason: 'GuestShutdown', domainState: 'shutdown', qemuPid: 0, shutdownDone: false },
        shutdown: { phase: 'Succeeded', reason: 'GuestShutdown', domainState: 'shutoff' },
        kill: { phase: 'Succeeded', reason: 'GuestShutdown', domainState: 'shutoff' },
        destroyCalls: 0,
      },
      'Succeeded before libvirt answers; both calls return once it is done, without a destroy racing it',
    );
    await manager.close();
  },
);

t.test('a Kill during a graceful shutdown destroys the VM at once instead of waiting out the grace period', async (t) => {
  const { manager, libvirt, spec } = setUp(t);
  await manager.sync(JSON.stringify(spec));
  // A guest that ignores the power button: the shutdown would wait its whole hour.
  const shutdown = manager.shutdown(3600);
  await libvirt.powerButtonPressed;
  const kill = manager.kill();
  await settled();
  const destroyedAtOnce = libvirt.destroyCalls;
  // libvirt confirms the destroy (and, had nothing destroyed the domain, the guest finally goes: neither call hangs).
  libvirt.domainState = 'shutoff';
  manager.onLifecycle({ type: 'Stopped', detail: 'Destroyed' });
  t.match(
    { destroyedAtOnce, kill: await kill, shutdown: await shutdown },
    {
      destroyedAtOnce: 1,
      kill: { phase: 'Succeeded', reason: 'Killed' },
      shutdown: { phase: 'Succeeded', reason: 'Killed' },
    },
    'the Kill supersedes the shutdown: one destroy before anything else happened, and both calls end with the VM Killed',
  );
  await manager.close(); // as the launcher does after a Kill: its console connection goes with it
});

t.test('a Kill for a failure (a liveness probe) ends the run Failed with its cause', async (t) => {
  const { manager, libvirt, spec } = setUp(t);
  await manager.sync(JSON.stringify(spec));
  const kill = manager.kill({ reason: 'LivenessProbeFailed', message: 'Liveness probe failed: connection refused' });
  while (libvirt.domainState !== 'shutoff') await settled();
  manager.onLifecycle({ type: 'Stopped', detail: 'Destroyed' });
  t.match(await kill, { phase: 'Failed', reason: 'LivenessProbeFailed', message: 'Liveness probe failed: connection refused' });
  await manager.close();
});

t.test('soft reboot asks the guest agent when it is connected, else presses the ACPI button; refused paused or with neither', async (t) => {
  const outcome = async (specFields: Partial<VmSpec>, prepare: (m: VmManager, l: FakeLibvirt) => Promise<void> = async () => {}) => {
    const { manager, libvirt, spec } = setUp(t);
    await manager.sync(JSON.stringify({ ...spec, ...specFields }));
    await prepare(manager, libvirt);
    const result = await manager.softReboot().catch((err: Error) => `refused: ${err.message}`);
    // Power off, as libvirt confirms a destroy, so that close() finds the VM gone.
    const killed = manager.kill();
    while (libvirt.domainState !== 'shutoff') await settled();
    manager.onLifecycle({ type: 'Stopped', detail: 'Destroyed' });
    await killed;
    await manager.close();
    return { result, reboots: libvirt.reboots };
  };
  const agentConnects = async (m: VmManager, l: FakeLibvirt) => {
    l.agentUp = true;
    m.onAgentLifecycle();
    while (!m.current.guestAgentConnected) await settled();
  };
  t.same(
    {
      agent: await outcome({ guestAgent: true, acpi: true }, agentConnects),
      acpi: await outcome({ guestAgent: true, acpi: true }),
      neither: await outcome({ guestAgent: false, acpi: false }),
      paused: await outcome({ acpi: true }, async (m) => void (await m.pause())),
    },
    {
      agent: { result: 'GuestAgent', reboots: ['agent'] },
      acpi: { result: 'Acpi', reboots: ['acpi'] },
      neither: { result: 'refused: cannot reboot: the guest agent is not connected and the VM has no ACPI', reboots: [] },
      paused: { result: 'refused: cannot reboot: the VM is paused', reboots: [] },
    },
  );
});

t.test('once libvirtd has died, Kill, Shutdown and close end without asking libvirt, which can no longer answer', async (t) => {
  const { manager, libvirt, spec } = setUp(t);
  await manager.sync(JSON.stringify(spec));
  // As after libvirtd's SIGKILL: every call on the old connection fails.
  const libvirtCalls: string[] = [];
  for (const op of ['state', 'destroy', 'undefine', 'shutdownAcpi'] as const) {
    libvirt[op] = async () => {
      libvirtCalls.push(op);
      throw new Error('invalid connection pointer in virConnectListAllDomains');
    };
  }
  manager.libvirtdExited('libvirtd was killed by SIGKILL; QEMU went with it');
  const outcome = {
    kill: await manager.kill().catch((err: Error) => `refused: ${err.message}`),
    shutdown: await manager.shutdown(30).catch((err: Error) => `refused: ${err.message}`),
    close: await manager.close().then(
      () => 'closed',
      (err: Error) => `refused: ${err.message}`,
    ),
  };
  t.match(
    { ...outcome, libvirtCalls },
    {
      kill: { phase: 'Failed', reason: 'LibvirtdExited' },
      shutdown: { phase: 'Failed', reason: 'LibvirtdExited' },
      close: 'closed',
      libvirtCalls: [],
    },
    'the VM stays Failed with the reason libvirtd died, and the launcher can exit cleanly',
  );
});

t.test('a run publishes whether its firmware writes to the console, and when the guest agent first connected', async (t) => {
  const run = async (firmware: VmSpec['firmware']) => {
    const { manager, libvirt, spec } = setUp(t);
    await manager.sync(JSON.stringify({ ...spec, firmware, guestAgent: true }));
    const before = Date.now();
    libvirt.agentUp = true;
    manager.onAgentLifecycle();
    while (!manager.current.guestAgentConnected) await settled();
    const { firmwareOnConsole, guestAgentConnectedAtUnixMs } = manager.current;
    const killed = manager.kill();
    while (libvirt.domainState !== 'shutoff') await settled();
    manager.onLifecycle({ type: 'Stopped', detail: 'Destroyed' });
    await killed;
    await manager.close();
    return { firmwareOnConsole, agentStamped: guestAgentConnectedAtUnixMs >= before };
  };
  t.same(
    {
      bios: await run({ kind: 'bios' }),
      biosOnSerial: await run({ kind: 'bios', useSerial: true }),
      efi: await run({ kind: 'efi', secureBoot: false }),
    },
    {
      bios: { firmwareOnConsole: false, agentStamped: true },
      biosOnSerial: { firmwareOnConsole: true, agentStamped: true },
      efi: { firmwareOnConsole: true, agentStamped: true },
    },
  );
});

t.test('a disk grown while the VM is not running has no QEMU to tell: resizeDisk succeeds and asks libvirt nothing', async (t) => {
  const { manager, libvirt } = setUp(t);
  await manager.resizeDisk('/volumes/pv-1/disk.img', 96 * 1024 * 1024);
  t.same([...libvirt.diskBytes], [], 'no block_resize');
  await manager.close();
});

t.test("vkvm's start work runs at the default CPU weight; the pod's applies when the vCPUs first run, and stays", async (t) => {
  const { manager, libvirt, spec } = setUp(t);
  const tenMilli = { ...spec, cpu: { ...spec.cpu, requestMillicores: 10 } };
  await manager.sync(JSON.stringify(tenMilli));
  t.same(
    libvirt.runLog,
    ['limits at default', 'weight 10 shares', 'resume'],
    'limits before QEMU starts, the weight right before the resume',
  );
  await manager.pause();
  await manager.unpause();
  await manager.reset();
  t.same(libvirt.runLog.slice(3), ['resume'], 'a pause, unpause or reset keeps the weight');
  await manager.sync(JSON.stringify({ ...tenMilli, labels: { more: 'x' } }));
  t.same(libvirt.runLog.slice(4), ['limits at 10 shares'], "a live change while it runs re-applies the pod's weight");
  const killed = manager.kill();
  while (libvirt.domainState !== 'shutoff') await settled();
  manager.onLifecycle({ type: 'Stopped', detail: 'Destroyed' });
  await killed;
  await manager.close();
});
