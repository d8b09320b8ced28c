// Node status derived from host facts by pure functions. Nothing else sets the
// node's conditions, capacity or labels; the controller only diffs and patches.
import type { V1NodeCondition, V1NodeStatus } from '@kubernetes/client-node';
import type { AgentConfig } from '../config.js';
import type { HostFacts } from './host-facts.js';

export const VKVM_VERSION = '0.1.0';

/** Eviction-style thresholds, as the kubelet's defaults. */
export const MEMORY_PRESSURE_BELOW_BYTES = 100 * 1024 * 1024;
export const DISK_PRESSURE_BELOW_FRACTION = 0.1;
export const PID_PRESSURE_ABOVE_FRACTION = 0.9;

export const KVM_DEVICE_RESOURCE = 'devices.kubevirt.io/kvm';
/** KubeVirt's device plugin advertises this many KVM "devices" per host. */
export const KVM_DEVICE_COUNT = 1000;

export const VIRTUALIZATION_LABEL = 'vkvm.io/virtualization';
export const HARDWARE_VIRTUALIZATION_CONDITION = 'HardwareVirtualization';

type ConditionValue = { status: 'True' | 'False' | 'Unknown'; reason: string; message: string };

/** One condition as an ordered list of (predicate, value); the first match wins, the last entry is the fallback. */
type ConditionRule = { type: string; cases: Array<[(f: HostFacts) => boolean, ConditionValue]> };

const always = () => true;
const memoryLow = (f: HostFacts) => f.memoryAvailableBytes < MEMORY_PRESSURE_BELOW_BYTES;
const diskLow = (f: HostFacts) => f.diskAvailableBytes < f.diskTotalBytes * DISK_PRESSURE_BELOW_FRACTION;
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
      [diskLow, { status: 'True', reason: 'KubeletHasDiskPressure', message: 'less than 10% of the state filesystem is free' }],
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
    const value = { type, ...match[1] };
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

/** Status fields vkvm owns. Conditions of other components are left alone by the patch. */
export function deriveNodeStatus(config: AgentConfig, facts: HostFacts, previous: V1NodeCondition[], now: Date): V1NodeStatus {
  const capacity: Record<string, string> = {
    cpu: String(facts.cpuCount),
    memory: ki(facts.memoryTotalBytes),
    'ephemeral-storage': ki(facts.diskTotalBytes),
    pods: String(config.maxPods),
  };
  if (facts.virtualization.accelerator === 'kvm') capacity[KVM_DEVICE_RESOURCE] = String(KVM_DEVICE_COUNT);
  const allocatable = {
    ...capacity,
    memory: ki(Math.max(0, facts.memoryTotalBytes - config.memoryReservedMiB * 1024 * 1024)),
  };
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
