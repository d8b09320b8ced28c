// The VM controller's pure half: the VMI a VM's template makes, and the VM
// status after a sync (vm-status.ts decides printableStatus and the back-off;
// this adds the bookkeeping KubeVirt keeps beside it: conditions, the
// state-change requests, startFailure). vm-controller.ts does the I/O.
import { controllerRefTo } from '../kubevirt/controller-ref.js';
import { createHash } from 'node:crypto';
import { removeCondition, setCondition, findCondition, unsupportedMessage } from '../kubevirt/conditions.js';
import { SUPPORTED_VM_SPEC } from '../kubevirt/supported-fields.js';
import { KUBEVIRT_API_VERSION, PAUSED_ANNOTATION } from '../kubevirt/types.js';
import type {
  Condition,
  VirtualMachine,
  VirtualMachineInstance,
  VirtualMachineStateChangeRequest,
  VirtualMachineStatus,
  VmConditionType,
} from '../kubevirt/types.js';
import { deriveVmStatus, nextStartFailure, restartsAfterDelete, type VmiAction } from './vm-status.js';

/** Label on a VMI naming the VM that created it (KubeVirt's kubevirt.io/vm). */
export const VM_LABEL = 'kubevirt.io/vm';

/**
 * Annotation on a VMI: the hash of the VM template spec it was made from, so that a later change of the
 * template shows as RestartRequired (KubeVirt keeps the spec in a ControllerRevision for the same check).
 */
export const TEMPLATE_HASH_ANNOTATION = 'vkvm.io/vm-template-hash';

/** KubeVirt's message when a running VM's template changed in a field it cannot apply live (all, on vkvm). */
export const RESTART_REQUIRED_MESSAGE = 'a non-live-updatable field was changed in the template spec';

/** JSON with object keys sorted, so equal specs hash equal whatever order their fields came in. */
export function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  if (value && typeof value === 'object')
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${sortedJson((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(value) ?? 'null';
}

/** The hash of a VM's template spec (its metadata, labels and annotations, aside: those are not restarts). */
export function templateHash(vm: VirtualMachine): string {
  return createHash('sha256').update(sortedJson(vm.spec.template.spec)).digest('hex').slice(0, 32);
}

/** KubeVirt's firmwareUUIDns: the namespace of the name-based firmware UUIDs. */
const FIRMWARE_UUID_NS = '6a1a24a1-4061-4607-8bf4-a3963d0c5895';

/**
 * A UUID v5 of `name` in `namespace` (RFC 4122 §4.3), as Go's uuid.NewSHA1:
 * KubeVirt's CalculateLegacyUUID gives a VM's VMIs this firmware UUID when the
 * template sets none, so the guest sees the same machine after every restart.
 */
export function firmwareUuid(name: string): string {
  const ns = Buffer.from(FIRMWARE_UUID_NS.replaceAll('-', ''), 'hex');
  const h = createHash('sha1').update(ns).update(name).digest().subarray(0, 16);
  h[6] = (h[6]! & 0x0f) | 0x50;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const hex = h.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The first state-change request starts the VM paused (virtctl start --paused: data paused=true). */
export function hasStartPausedRequest(vm: VirtualMachine): boolean {
  const request = vm.status?.stateChangeRequests?.[0];
  return request?.action === 'Start' && request.data?.paused === 'true';
}

/**
 * The VMI a VM starts: its template (with its instancetype and preference expanded, when it names them),
 * named after the VM and controlled by it. The template hash is the VM's own template's.
 * A paused start marks it with the paused annotation (KubeVirt sets
 * startStrategy Paused), which the node applies as soon as the VM runs.
 */
export function vmiFromTemplate(
  vm: VirtualMachine,
  template: VirtualMachine['spec']['template'] = vm.spec.template,
): VirtualMachineInstance {
  const name = vm.metadata.name!;
  const spec = structuredClone(template.spec);
  spec.domain ??= {};
  if (!spec.domain.firmware?.uuid) spec.domain.firmware = { ...(spec.domain.firmware ?? {}), uuid: firmwareUuid(name) };
  const annotations = {
    ...(template.metadata?.annotations ?? {}),
    ...(hasStartPausedRequest(vm) ? { [PAUSED_ANNOTATION]: 'true' } : {}),
    [TEMPLATE_HASH_ANNOTATION]: templateHash(vm),
  };
  return {
    apiVersion: KUBEVIRT_API_VERSION,
    kind: 'VirtualMachineInstance',
    metadata: {
      name,
      namespace: vm.metadata.namespace ?? 'default',
      labels: { ...(template.metadata?.labels ?? {}), [VM_LABEL]: name },
      annotations,
      ownerReferences: [controllerRefTo(vm, KUBEVIRT_API_VERSION, 'VirtualMachine')],
    },
    spec,
  };
}

/** The VMI's controller reference points at this VM (same UID). */
export function controlledBy(vmi: VirtualMachineInstance, vm: VirtualMachine): boolean {
  return Boolean(vmi.metadata.ownerReferences?.some((r) => r.controller && r.uid === vm.metadata.uid));
}

/** The VM spec fields vkvm acts on; the rest (instancetype, preference, dataVolumeTemplates, …) it only keeps. */
const SUPPORTED_VM_SPEC_FIELDS: ReadonlySet<string> = new Set(Object.keys(SUPPORTED_VM_SPEC));

/**
 * Fields of the VM itself (not its template, whose fields the node reports
 * on the VMI) that vkvm keeps but does not realize, as field paths.
 */
export function unsupportedVmFields(vm: VirtualMachine): string[] {
  return Object.keys(vm.spec ?? {})
    .filter((k) => !SUPPORTED_VM_SPEC_FIELDS.has(k))
    .sort()
    .map((k) => `spec.${k}`);
}

/** How the sync's create or delete went; 'keep' never fails. */
export type ActionOutcome = { ok: true } | { ok: false; reason: 'FailedCreate' | 'FailedDelete'; message: string };

/**
 * The state-change requests after the sync (KubeVirt's addStartRequest and
 * its removal of served requests): a deleted RerunOnFailure VMI that failed
 * leaves a Start request, a created VMI consumes one, and a Stop request is
 * dropped once its VMI is gone.
 */
export function nextStateChangeRequests(
  vm: VirtualMachine,
  vmi: VirtualMachineInstance | undefined,
  action: VmiAction,
  outcome: ActionOutcome,
): VirtualMachineStateChangeRequest[] | undefined {
  const requests = [...(vm.status?.stateChangeRequests ?? [])];
  if (outcome.ok && action === 'delete' && vmi && restartsAfterDelete(vm, vmi) && !requests.some((r) => r.action === 'Start')) {
    requests.push({ action: 'Start' });
  }
  // A Stop whose VMI is gone has been served; dropped first, so that a create in the same sync consumes the Start behind it (restart).
  const first = requests[0];
  if (first?.action === 'Stop' && action !== 'delete' && (!vmi || first.uid !== vmi.metadata.uid)) requests.shift();
  if (outcome.ok && action === 'create' && requests[0]?.action === 'Start') requests.shift();
  return requests.length > 0 ? requests : undefined;
}

export interface VmSyncInput {
  vm: VirtualMachine;
  /** The VM's own VMI (controlled by it), if the cache shows one. */
  vmi?: VirtualMachineInstance;
  /** What the sync did, and how that went. */
  action: VmiAction;
  outcome: ActionOutcome;
  /** This controller created the VMI and its cache does not show it yet. */
  createPending?: boolean;
  now: Date;
  /** In [0, 1): the back-off's random part. */
  jitter: number;
  /** The VM's DataVolumes hold its VMI back: still provisioning, or one failed. */
  dataVolumes?: 'provisioning' | 'failed';
}

/**
 * The VM's template changed since its VMI was made from it, and that VMI still runs: the change waits for a
 * restart (a stop and start, or virtctl restart, makes the next VMI from the template as it is). A VMI made
 * before vkvm recorded the hash cannot tell, and says nothing.
 */
export function restartRequired(vm: VirtualMachine, vmi: VirtualMachineInstance | undefined): boolean {
  const madeFrom = vmi?.metadata.annotations?.[TEMPLATE_HASH_ANNOTATION];
  const final = vmi?.status?.phase === 'Succeeded' || vmi?.status?.phase === 'Failed';
  return Boolean(vmi && madeFrom && !final && controlledBy(vmi, vm) && madeFrom !== templateHash(vm));
}

function vmConditions(i: VmSyncInput): Condition<VmConditionType>[] {
  const { vm, vmi, now } = i;
  let conditions: Condition<VmConditionType>[] = vm.status?.conditions ?? [];
  const ready = findCondition(vmi?.status?.conditions, 'Ready');
  conditions = setCondition(
    conditions,
    !vmi
      ? { type: 'Ready', status: 'False', reason: 'VMINotExists', message: 'VMI does not exist' }
      : ready
        ? {
            type: 'Ready',
            status: ready.status,
            ...(ready.reason ? { reason: ready.reason } : {}),
            ...(ready.message ? { message: ready.message } : {}),
          }
        : { type: 'Ready', status: 'False', reason: 'VMINotReady', message: 'VMI is not ready yet' },
    now,
  );
  const paused = findCondition(vmi?.status?.conditions, 'Paused');
  conditions =
    paused?.status === 'True'
      ? setCondition(conditions, { type: 'Paused', status: 'True', ...(paused.reason ? { reason: paused.reason } : {}) }, now)
      : removeCondition(conditions, 'Paused');
  conditions = i.outcome.ok
    ? removeCondition(conditions, 'Failure')
    : setCondition(conditions, { type: 'Failure', status: 'True', reason: i.outcome.reason, message: i.outcome.message }, now);
  conditions = restartRequired(vm, vmi)
    ? setCondition(conditions, { type: 'RestartRequired', status: 'True', message: RESTART_REQUIRED_MESSAGE }, now)
    : removeCondition(conditions, 'RestartRequired');
  const unsupported = unsupportedVmFields(vm);
  conditions = unsupported.length
    ? setCondition(
        conditions,
        { type: 'UnsupportedFields', status: 'True', reason: 'Ignored', message: unsupportedMessage(unsupported) },
        now,
      )
    : removeCondition(conditions, 'UnsupportedFields');
  return conditions;
}

/** The VM's status after the sync: every field the VM controller owns. */
export function nextVmStatus(i: VmSyncInput): VirtualMachineStatus {
  const { vm, vmi, now, action, outcome } = i;
  const startFailure = nextStartFailure(vm, vmi, now, i.jitter);
  const stateChangeRequests = nextStateChangeRequests(vm, vmi, action, outcome);
  // Derive from the VM as it is after this sync, with what was just done expected.
  const after: VirtualMachine = { ...vm, status: { ...(vm.status ?? {}), startFailure, stateChangeRequests } };
  const derived = deriveVmStatus({
    vm: after,
    ...(vmi ? { vmi } : {}),
    now,
    startExpected: !vmi && ((action === 'create' && outcome.ok) || Boolean(i.createPending)),
    stopExpected: action === 'delete' && outcome.ok,
    ...(i.dataVolumes ? { dataVolumes: i.dataVolumes } : {}),
  });
  return {
    ...(vm.status ?? {}),
    ...derived,
    created: derived.created || (action === 'create' && outcome.ok) || Boolean(i.createPending),
    conditions: vmConditions(i),
    startFailure,
    stateChangeRequests,
  };
}

/** The VM status fields this controller owns (everything else on status is left alone). */
export const VM_STATUS_FIELDS = [
  'printableStatus',
  'created',
  'ready',
  'runStrategy',
  'conditions',
  'startFailure',
  'stateChangeRequests',
  'instancetypeRef',
  'preferenceRef',
] as const;
