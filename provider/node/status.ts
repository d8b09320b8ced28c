// Node status derived from host facts by pure functions. Nothing else sets the
// node's conditions, capacity or labels; the controller only diffs and patches.
import type { V1NodeCondition, V1NodeStatus } from '@kubernetes/client-node';
import type { AgentConfig } from '../config.js';
import type { FsFacts, HostFacts } from './host-facts.js';

export const VKVM_VERSION = '0.1.0';

/**
 * Eviction-style thresholds, as the kubelet's evictionHard defaults:
 * memory.available<100Mi, nodefs.available<10%, imagefs.available<15%,
 * nodefs.inodesFree<5%, imagefs.inodesFree<5%.
 */
export const MEMORY_PRESSURE_BELOW_BYTES = 100 * 1024 * 1024;
export const NODEFS_AVAILABLE_BELOW_FRACTION = 0.1;
export const IMAGEFS_AVAILABLE_BELOW_FRACTION = 0.15;
export const INODES_FREE_BELOW_FRACTION = 0.05;
export const PID_PRESSURE_ABOVE_FRACTION = 0.9;

/** The node conditions under which the kubelet refuses new pods (its eviction manager's admission). */
export const PRESSURE_CONDITIONS = ['MemoryPressure', 'DiskPressure', 'PIDPressure'] as const;
export type PressureCondition = (typeof PRESSURE_CONDITIONS)[number];

export const KVM_DEVICE_RESOURCE = 'devices.kubevirt.io/kvm';
/** KubeVirt's device plugin advertises this many KVM "devices" per host. */
export const KVM_DEVICE_COUNT = 1000;

export const VIRTUALIZATION_LABEL = 'vkvm.io/virtualization';
export const HARDWARE_VIRTUALIZATION_CONDITION = 'HardwareVirtualization';

type ConditionValue = { status: 'True' | 'False' | 'Unknown'; reason: string; message: string };

/** One condition as an ordered list of (predicate, value); the first match wins, the last entry is the fallback. */
type ConditionRule = {
  type: string;
  cases: Array<[(f: HostFacts) => boolean, ConditionValue | ((f: HostFacts) => ConditionValue)]>;
};

const always = () => true;
const memoryLow = (f: HostFacts) => f.memoryAvailableBytes < MEMORY_PRESSURE_BELOW_BYTES;

/** Why a filesystem is short of space or inodes, below the fraction given for space; undefined when it is not. */
function shortOf(fs: FsFacts, name: string, availableBelow: number): string | undefined {
  const pct = (f: number) => `${Math.round(f * 100)}%`;
  if (fs.availableBytes < fs.totalBytes * availableBelow)
    return `${name} (${fs.dir}) has less than ${pct(availableBelow)} of its space free`;
  if (fs.inodes > 0 && fs.inodesFree < fs.inodes * INODES_FREE_BELOW_FRACTION)
    return `${name} (${fs.dir}) has less than ${pct(INODES_FREE_BELOW_FRACTION)} of its inodes free`;
  return undefined;
}

/** The filesystems short of space or inodes: the state filesystem (nodefs) first, then the image filesystems. */
function diskShortages(f: HostFacts): string[] {
  return [
    shortOf(f.nodeFs, 'the state filesystem', NODEFS_AVAILABLE_BELOW_FRACTION),
    ...f.imageFs.map((fs) => shortOf(fs, 'the image filesystem', IMAGEFS_AVAILABLE_BELOW_FRACTION)),
  ].filter((m): m is string => m !== undefined);
}
const diskLow = (f: HostFacts) => diskShortages(f).length > 0;
const pidsHigh = (f: HostFacts) => f.pidsInUse > f.pidMax * PID_PRESSURE_ABOVE_FRACTION;
const noAddress = (f: HostFacts) => f.internalIP === null;
const hardPreflightFailed = (f: HostFacts) => f.preflight.some((c) => !c.ok && c.severity === 'hard');

const RULES: ConditionRule[] = [
  {
    type: 'MemoryPressure',
    cases: [
      [memoryLow, { status: 'True', reason: 'KubeletHasInsufficientMemory', message: 'available memory is below 100Mi' }],
      [always, { status: 'False', reason: 'KubeletHasSufficientMemory', message: 'vkvm has sufficient memory available' }],
    ],
  },
  {
    type: 'DiskPressure',
    cases: [
      [diskLow, (f) => ({ status: 'True', reason: 'KubeletHasDiskPressure', message: diskShortages(f).join('; ') })],
      [always, { status: 'False', reason: 'KubeletHasNoDiskPressure', message: 'vkvm has no disk pressure' }],
    ],
  },
  {
    type: 'PIDPressure',
    cases: [
      [pidsHigh, { status: 'True', reason: 'KubeletHasInsufficientPID', message: 'more than 90% of pid_max is in use' }],
      [always, { status: 'False', reason: 'KubeletHasSufficientPID', message: 'vkvm has sufficient PID available' }],
    ],
  },
  {
    type: 'NetworkUnavailable',
    cases: [
      [noAddress, { status: 'True', reason: 'NoInternalIP', message: 'the host has no IPv4 address on its default route' }],
      [always, { status: 'False', reason: 'VkvmNetworkReady', message: 'the host has an InternalIP' }],
    ],
  },
  {
    type: HARDWARE_VIRTUALIZATION_CONDITION,
    cases: [
      [(f) => f.virtualization.accelerator === 'kvm', { status: 'True', reason: 'KVM', message: '' }],
      [always, { status: 'False', reason: 'SoftwareEmulation', message: '' }],
    ],
  },
  {
    type: 'Ready',
    cases: [
      [noAddress, { status: 'False', reason: 'KubeletNotReady', message: 'no InternalIP to serve the kubelet API on' }],
      [
        hardPreflightFailed,
        { status: 'False', reason: 'HostRequirementsUnmet', message: 'a host requirement failed; see the conditions with status False' },
      ],
      [always, { status: 'True', reason: 'KubeletReady', message: 'vkvm is posting ready status' }],
    ],
  },
];

/**
 * Preflight checks as conditions, True when the check passes. KVM is left
 * out: HardwareVirtualization reports it.
 */
function preflightConditions(facts: HostFacts): Array<{ type: string } & ConditionValue> {
  return facts.preflight
    .filter((c) => c.condition !== 'KVMUsable')
    .map((c) => ({ type: c.condition, status: c.ok ? 'True' : 'False', reason: c.reason, message: c.message }));
}

export function deriveConditions(facts: HostFacts, previous: V1NodeCondition[], now: Date): V1NodeCondition[] {
  const values = RULES.map(({ type, cases }) => {
    const match = cases.find(([pred]) => pred(facts));
    if (!match) throw new Error(`condition ${type} has no fallback`);
    const value = { type, ...(typeof match[1] === 'function' ? match[1](facts) : match[1]) };
    if (type === HARDWARE_VIRTUALIZATION_CONDITION) value.message = facts.virtualization.reason;
    return value;
  });
  return [...preflightConditions(facts), ...values].map(({ type, ...value }) => {
    const prev = previous.find((c) => c.type === type);
    const unchanged = prev && prev.status === value.status;
    return {
      type,
      ...value,
      lastHeartbeatTime: now,
      lastTransitionTime: unchanged && prev.lastTransitionTime ? prev.lastTransitionTime : now,
    };
  });
}

/** The pressure conditions the node is under, by these facts: what the kubelet's admission refuses new pods on. */
export function pressureConditions(facts: HostFacts): PressureCondition[] {
  const statuses = deriveConditions(facts, [], new Date(0));
  return PRESSURE_CONDITIONS.filter((type) => statuses.some((c) => c.type === type && c.status === 'True'));
}

export function deriveLabels(config: AgentConfig, facts: HostFacts): Record<string, string> {
  return {
    ...config.extraLabels,
    type: 'virtual-kubelet',
    'kubernetes.io/hostname': config.nodeName,
    'kubernetes.io/os': 'linux',
    'kubernetes.io/arch': facts.architecture,
    'kubevirt.io/schedulable': 'true',
    [VIRTUALIZATION_LABEL]: facts.virtualization.accelerator,
  };
}

const ki = (bytes: number) => `${Math.floor(bytes / 1024)}Ki`;

function deriveCapacity(config: AgentConfig, facts: HostFacts): Record<string, string> {
  const capacity: Record<string, string> = {
    cpu: String(facts.cpuCount),
    memory: ki(facts.memoryTotalBytes),
    'ephemeral-storage': ki(facts.nodeFs.totalBytes),
    pods: String(config.maxPods),
  };
  if (facts.virtualization.accelerator === 'kvm') capacity[KVM_DEVICE_RESOURCE] = String(KVM_DEVICE_COUNT);
  return capacity;
}

/** What pods may have of the node: what the scheduler places by, and what the node's own admission holds pods to. */
export function deriveAllocatable(config: AgentConfig, facts: HostFacts): Record<string, string> {
  return {
    ...deriveCapacity(config, facts),
    memory: ki(Math.max(0, facts.memoryTotalBytes - config.memoryReservedMiB * 1024 * 1024)),
    // As the kubelet: capacity less the hard eviction threshold, the part pods can never have.
    'ephemeral-storage': ki(facts.nodeFs.totalBytes * (1 - NODEFS_AVAILABLE_BELOW_FRACTION)),
  };
}

/** Status fields vkvm owns. Conditions of other components are left alone by the patch. */
export function deriveNodeStatus(config: AgentConfig, facts: HostFacts, previous: V1NodeCondition[], now: Date): V1NodeStatus {
  const capacity = deriveCapacity(config, facts);
  const allocatable = deriveAllocatable(config, facts);
  const addresses = [{ type: 'Hostname', address: facts.hostname }];
  if (facts.internalIP) addresses.unshift({ type: 'InternalIP', address: facts.internalIP });
  return {
    capacity,
    allocatable,
    conditions: deriveConditions(facts, previous, now),
    addresses,
    daemonEndpoints: { kubeletEndpoint: { Port: config.kubeletPort } },
    // For the scheduler's image locality, as the kubelet reports them.
    images: facts.images,
    nodeInfo: {
      architecture: facts.architecture,
      bootID: facts.bootID,
      containerRuntimeVersion: `vkvm://${VKVM_VERSION}`,
      kernelVersion: facts.kernelVersion,
      kubeProxyVersion: '',
      kubeletVersion: `v${VKVM_VERSION}`,
      machineID: facts.machineID,
      operatingSystem: 'linux',
      osImage: facts.osImage,
      systemUUID: facts.machineID,
    },
  };
}

/** JSON with sorted keys and without undefined members, for order-insensitive comparison. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Date)
      ? Object.fromEntries(
          Object.entries(v)
            .filter(([, x]) => x !== undefined)
            .sort(([a], [b]) => a.localeCompare(b)),
        )
      : v,
  );
}

/** True when two statuses differ in anything but heartbeat times. */
export function statusChanged(a: V1NodeStatus, b: V1NodeStatus): boolean {
  const strip = (s: V1NodeStatus) =>
    canonical({
      ...s,
      conditions: (s.conditions ?? [])
        .map(({ lastHeartbeatTime: _h, lastTransitionTime: _t, ...rest }) => rest)
        .sort((x, y) => x.type.localeCompare(y.type)),
    });
  return strip(a) !== strip(b);
}
