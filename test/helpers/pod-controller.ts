// The pod controller with fakes for everything around it, for its unit tests:
// launchers that run no process (a test powers a VM off, crashes it, or kills
// its launcher), a pod cache and API server in memory (status patches and
// deletions land on the cached pod, checked by UID as the API server does),
// and a clock that moves only when told.
import type { Test } from 'tap';
import type { V1ObjectReference, V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import type { EventRecorder, EventType } from '../../provider/kube/events.js';
import { keyOfObject } from '../../provider/kube/informer.js';
import type { LauncherView, Launchers, LiveLauncher, VmControl } from '../../provider/launchers/registry.js';
import { createAgentMetrics, type AgentMetrics } from '../../provider/metrics.js';
import { ChildCpuMeter } from '../../provider/child-cpu.js';
import { PodController, type PodControllerOptions, type PodInformer } from '../../provider/pods/controller.js';
import type { PodApi } from '../../provider/pods/pod-api.js';
import type { VmNetwork } from '../../provider/pods/vm-runtime.js';
import type { VmiSource } from '../../provider/pods/vmi-source.js';
import type { VmState } from '../../launcher/agent-api.js';
import type { VmSpec } from '../../vmm/spec.js';
import { fakeClock, type FakeClock } from './fake-clock.js';

/** What a fake launcher and its helpers have used by the time its VM runs (launchers.cpuMs). */
export const FAKE_LAUNCHER_CPU_MS = 200;
/** What the host commands of a VM's first network attach cost in the fake network. */
export const FAKE_ATTACH_CPU_MS = 30;

/** An API error as client-node raises it, with its HTTP code. */
const apiError = (code: number, message: string) => Object.assign(new Error(message), { code });

export class FakeLaunchers implements Launchers<VmControl> {
  private readonly views = new Map<string, LauncherView<VmControl>>();
  private readonly handlers: Array<(uid: string) => void> = [];
  /** Launchers an earlier agent left, found by the next discover(). */
  private readonly leftBehind = new Map<string, LauncherView<VmControl>>();
  /** Launcher starts per VM. */
  readonly starts = new Map<string, number>();
  readonly removed: string[] = [];
  /** What a launcher's SyncVm does before the VM runs: throw (a missing image), or wait (a slow start). */
  onSync: (spec: VmSpec) => Promise<void> = async () => {};
  private generation = 0;

  constructor(private readonly clock: FakeClock) {}

  onChange(handler: (uid: string) => void): void {
    this.handlers.push(handler);
  }
  get(uid: string): LauncherView<VmControl> | undefined {
    return this.views.get(uid);
  }
  uids(): string[] {
    return [...this.views.keys()];
  }
  async prepare(): Promise<void> {}
  async discover(): Promise<string[]> {
    for (const [uid, view] of this.leftBehind) if (!this.views.has(uid)) this.views.set(uid, view);
    this.leftBehind.clear();
    return this.uids();
  }
  async start(uid: string): Promise<LiveLauncher<VmControl>> {
    const current = this.views.get(uid);
    if (current?.live) return current;
    this.starts.set(uid, (this.starts.get(uid) ?? 0) + 1);
    const live = this.live(uid, { phase: 'Pending', reason: 'Created', startedAtUnixMs: 0, consoleOutputAtUnixMs: 0 });
    this.views.set(uid, live);
    return live;
  }
  /** A VM stops as a shutdown (grace period) or a kill leaves it; a launcher whose VM ended just exits. */
  async stop(uid: string, gracePeriodS: number): Promise<void> {
    const view = this.views.get(uid);
    if (!view?.live) return;
    const ended = view.state.phase === 'Succeeded' || view.state.phase === 'Failed';
    const exit = ended
      ? { phase: view.state.phase, reason: view.state.reason, message: view.state.message }
      : gracePeriodS > 0
        ? { phase: 'Succeeded' as const, reason: 'Shutdown', message: 'the guest powered off' }
        : { phase: 'Failed' as const, reason: 'Killed', message: 'the VM was killed' };
    this.gone(uid, { reason: 'LauncherExited', message: 'launcher exited', exit: { ...exit, atUnixMs: this.clock.now() } });
  }
  forget(uid: string): void {
    if (this.views.get(uid)?.live) throw new Error(`launcher of ${uid} still runs`);
    this.views.delete(uid);
  }
  async remove(uid: string): Promise<void> {
    if (this.views.get(uid)?.live) throw new Error(`the launcher of ${uid} still runs`);
    this.views.delete(uid);
    this.removed.push(uid);
  }
  close(): void {}
  async cpuMs(uid: string): Promise<number> {
    return this.views.get(uid)?.live ? FAKE_LAUNCHER_CPU_MS : 0;
  }

  // ---- what a test does to the VMs ----

  /** A launcher an earlier agent started, running its VM since `startedAtUnixMs`. */
  leaveRunning(uid: string, startedAtUnixMs = this.clock.now()): void {
    this.leftBehind.set(
      uid,
      this.live(uid, { phase: 'Running', reason: 'Booted', startedAtUnixMs, consoleOutputAtUnixMs: startedAtUnixMs }),
    );
  }
  powerOff(uid: string): void {
    this.setState(uid, { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off', qemuPid: 0 });
  }
  crash(uid: string): void {
    this.setState(uid, { phase: 'Failed', reason: 'Crashed', message: 'QEMU crashed', qemuPid: 0 });
  }
  /** The launcher is killed: QEMU dies with it, and no last word is left. */
  kill(uid: string): void {
    this.gone(uid, { reason: 'LauncherDied', message: 'launcher died without stopping the VM; QEMU died with it' });
  }
  running(uid: string): boolean {
    const view = this.views.get(uid);
    return !!view?.live && view.state.phase === 'Running';
  }

  private live(uid: string, s: Pick<VmState, 'phase' | 'reason' | 'startedAtUnixMs' | 'consoleOutputAtUnixMs'>): LiveLauncher<VmControl> {
    const state: VmState = {
      ...s,
      message: '',
      qemuPid: 0,
      consoleLogPath: `/vms/${uid}/console.log`,
      domainUuid: uid,
      generation: ++this.generation,
      firmwareOnConsole: false,
      guestAgentConnected: false,
      guestAgentConnectedAtUnixMs: 0,
    };
    const client: VmControl = {
      syncVm: async (spec) => {
        const view = this.views.get(uid);
        if (view?.live && view.state.phase === 'Running') return { state: view.state };
        await this.onSync(spec);
        const now = this.clock.now();
        return {
          state: this.setState(uid, {
            phase: 'Running',
            reason: 'Booted',
            qemuPid: 4242,
            startedAtUnixMs: now,
            consoleOutputAtUnixMs: now,
          }),
        };
      },
      pause: async () => this.setState(uid, { phase: 'Paused', reason: 'Paused' }),
      unpause: async () => this.setState(uid, { phase: 'Running', reason: 'Unpaused' }),
      kill: async (failure) =>
        this.setState(
          uid,
          failure ? { phase: 'Failed', ...failure } : { phase: 'Succeeded', reason: 'Killed', message: 'destroyed on request' },
        ),
    };
    return { uid, dir: `/vms/${uid}`, live: true, client, pid: 4200, state };
  }

  private setState(uid: string, change: Partial<VmState>): VmState {
    const view = this.views.get(uid);
    if (!view?.live) throw new Error(`no live launcher for ${uid}`);
    const state = { ...view.state, ...change, generation: ++this.generation };
    this.views.set(uid, { ...view, state });
    this.notify(uid);
    return state;
  }

  private gone(uid: string, gone: Extract<LauncherView, { live: false }>['gone']): void {
    const view = this.views.get(uid);
    if (!view?.live) return;
    this.views.set(uid, { uid, dir: view.dir, live: false, gone, lastState: view.state });
    this.notify(uid);
  }

  private notify(uid: string): void {
    for (const h of this.handlers) h(uid);
  }
}

/** The node's pod cache, and the API server's pod writes landing on it. */
export class FakePods implements PodInformer {
  private readonly pods = new Map<string, V1Pod>();
  private readonly handlers: Array<(pod: V1Pod) => void> = [];
  private resourceVersion = 0;
  readonly deleted: Array<{ namespace: string; name: string; uid: string }> = [];
  /** VMI status patches, as written. */
  readonly vmiStatusWrites: object[] = [];

  async start(): Promise<void> {}
  async stop(): Promise<void> {}
  get(key: string): V1Pod | undefined {
    return this.pods.get(key);
  }
  list(): readonly V1Pod[] {
    return [...this.pods.values()];
  }
  onChange(handler: (pod: V1Pod) => void): void {
    this.handlers.push(handler);
  }

  /** Creates or replaces a pod, as a watch event brings it. */
  put(pod: V1Pod): V1Pod {
    const stored = { ...pod, metadata: { ...pod.metadata, resourceVersion: String(++this.resourceVersion) } };
    this.pods.set(keyOfObject(stored), stored);
    for (const h of this.handlers) h(stored);
    return stored;
  }

  /** Changes a pod (an annotation, a deletion timestamp), as a user's update would. */
  update(key: string, change: (pod: V1Pod) => V1Pod): void {
    this.put(change(this.pods.get(key)!));
  }

  readonly api: PodApi = {
    patchPodStatus: async (namespace, name, body) => {
      const { metadata, status } = body as { metadata: { uid: string }; status: Record<string, unknown> };
      const pod = this.podWithUid(namespace, name, metadata.uid);
      const merged = Object.fromEntries(Object.entries({ ...pod.status, ...status }).filter(([, v]) => v !== null));
      this.put({ ...pod, status: merged });
    },
    patchVmiStatus: async (_namespace, _name, body) => void this.vmiStatusWrites.push(body),
    deletePod: async (namespace, name, uid) => {
      const pod = this.podWithUid(namespace, name, uid);
      this.deleted.push({ namespace, name, uid });
      this.pods.delete(keyOfObject(pod));
      for (const h of this.handlers) h(pod);
    },
  };

  private podWithUid(namespace: string, name: string, uid: string): V1Pod {
    const pod = this.pods.get(`${namespace}/${name}`);
    if (!pod) throw apiError(404, `pods "${name}" not found`);
    if (pod.metadata?.uid !== uid)
      throw apiError(409, `Precondition failed: UID in precondition: ${uid}, UID in object meta: ${pod.metadata?.uid}`);
    return pod;
  }
}

export interface RecordedEvent {
  object: string;
  type: EventType;
  reason: string;
  message: string;
}

export interface PodControllerEnv {
  controller: PodController;
  clock: FakeClock;
  launchers: FakeLaunchers;
  pods: FakePods;
  events: RecordedEvent[];
  /** This controller's metrics. */
  metrics: AgentMetrics;
  /** Lets every queued sync and deletion run to its end. */
  settle(): Promise<void>;
  /** Moves the clock on and lets what fell due run. */
  advance(ms: number): Promise<void>;
}

/**
 * A controller over fakes; `before` sets up what an earlier agent left (pods,
 * launchers) before it starts; `vmis`: the VMIs of launcher pods (none by default);
 * `images`: registry pulls (none by default).
 */
export async function podControllerEnv(
  t: Test,
  before: (env: Omit<PodControllerEnv, 'controller' | 'settle' | 'advance' | 'metrics'>) => void = () => {},
  vmis: VmiSource = {
    onChange: () => {},
    follow: () => {},
    stop: async () => {},
    specFor: async () => 'gone',
    read: async () => undefined,
  },
  images: PodControllerOptions['images'] = {
    resolve: async (_pod, spec) => ({ spec, fromRegistry: false }),
    resolveRunning: async (spec) => spec,
  },
  /** The node's side: downloads (none by default), pressure conditions (none), allocatable (no fit check), the disk VMs use (0), URL pins. */
  node: Partial<Pick<PodControllerOptions, 'downloadImage' | 'nodePressure' | 'nodeAllocatable' | 'usageBytes' | 'urlImages'>> = {},
): Promise<PodControllerEnv> {
  const clock = fakeClock();
  const launchers = new FakeLaunchers(clock);
  const pods = new FakePods();
  const events: RecordedEvent[] = [];
  const recordFor = (object: V1ObjectReference, type: EventType, reason: string, message: string) =>
    events.push({ object: `${object.kind}/${object.name}`, type, reason, message });
  const recorder: EventRecorder = {
    recordFor,
    record: (pod, type, reason, message) => recordFor({ kind: 'Pod', name: pod.metadata?.name ?? '' }, type, reason, message),
  };
  const metrics = createAgentMetrics();
  // The agent's reaped-children CPU, as the fake network's first attach of each VM moves it.
  let childCpuMs = 0;
  const attached = new Set<string>();
  const network: VmNetwork = {
    attach: async (spec) => {
      if (spec.interfaces.length && !attached.has(spec.uid)) {
        attached.add(spec.uid);
        childCpuMs += FAKE_ATTACH_CPU_MS;
      }
      return spec.interfaces.length
        ? {
            spec,
            attachment: {
              netnsPath: `/run/netns/${spec.uid}`,
              podIP: '10.244.0.5',
              mac: spec.interfaces[0]!.mac,
              interfaceName: 'default',
            },
          }
        : { spec };
    },
    detach: async () => {},
    ensureNode: async () => true,
    retainOnly: async () => [],
    guestDhcpAckedAt: async () => undefined,
    onGuestDhcp: () => () => {},
  };
  before({ clock, launchers, pods, events });
  const controller = new PodController({
    pods,
    launchers,
    vmis,
    network,
    api: pods.api,
    hostIP: () => '192.0.2.10',
    images,
    downloadImage: async () => {},
    usageBytes: async () => 0,
    ...node,
    events: recorder,
    metrics,
    log: pino({ level: 'silent' }),
    clock,
    childCpu: new ChildCpuMeter(() => childCpuMs),
  });
  t.teardown(() => controller.stop());
  await controller.start();
  const settle = () => controller.idle();
  await settle();
  return {
    controller,
    clock,
    launchers,
    pods,
    events,
    metrics,
    settle,
    advance: async (ms) => {
      clock.advance(ms);
      await settle();
    },
  };
}

/** A pod bound to the node whose VM boots a host image. */
export function vmPod(name: string, over: { uid?: string; restartPolicy?: string; memory?: string } = {}): V1Pod {
  return {
    metadata: { name, namespace: 'ns', uid: over.uid ?? `uid-${name}` },
    spec: {
      nodeName: 'node-1',
      restartPolicy: over.restartPolicy ?? 'Always',
      containers: [{ name: 'vm', image: '/images/disk.qcow2', resources: { limits: { memory: over.memory ?? '256Mi' } } }],
    },
  };
}
