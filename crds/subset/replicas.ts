// The VirtualMachineInstanceReplicaSet (kubevirt.io/v1) and the
// VirtualMachinePool (pool.kubevirt.io/v1alpha1), with KubeVirt's wire names
// (staging/src/kubevirt.io/api/core/v1/types.go, api/pool/v1alpha1): how many
// of a template, which objects count (the selector), and the status an HPA
// reads through the scale subresource. Their templates are the VMI spec and
// the VM spec tables, so they are checked as a VMI's and a VM's are. The
// specs themselves are typed whole, not preserved: a field vkvm does not
// realize (a pool's updateStrategy, a scaleInStrategy other than a sort
// policy) is refused by name (kubectl's strict field validation) rather
// than kept and ignored.
import type { ValidationRule } from '../schema.js';
import { condition } from './condition.js';
import { boolean, enumOf, integer, list, object, required, string, stringMap, type Field } from './field.js';
import { vmSpec } from './vm.js';
import { vmiSpec } from './vmi.js';

export const VMIRS_PLURAL = 'virtualmachineinstancereplicasets';
/** pool.kubevirt.io/v1alpha1: the VirtualMachinePool API. */
export const POOL_GROUP = 'pool.kubevirt.io';
export const POOL_VERSION = 'v1alpha1';
export const POOL_API_VERSION = `${POOL_GROUP}/${POOL_VERSION}` as const;
export const POOL_PLURAL = 'virtualmachinepools';

/** Bounds the CEL rules' cost over a selector (Kubernetes allows more; no workload needs it). */
const MAX_SELECTOR_TERMS = 32;

/** A label value's limit (Kubernetes'); keys may be longer (a DNS prefix). */
const MAX_LABEL_VALUE = 63;
const MAX_LABEL_KEY = 317;

/** Labels with bounded values, so the CEL rules below stay within the apiserver's cost budget. */
function labels(maxProperties?: number): Field<Record<string, string>, false> {
  return {
    schema: {
      type: 'object',
      ...(maxProperties !== undefined ? { maxProperties } : {}),
      additionalProperties: { type: 'string', maxLength: MAX_LABEL_VALUE },
    },
    schemaRequired: false,
    reads: true,
  };
}

export const SELECTOR_OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;

/** A metav1.LabelSelector; `immutable`: as a pool's, fixed once created. */
function labelSelector(immutable = false) {
  return object(
    {
      matchLabels: labels(MAX_SELECTOR_TERMS),
      matchExpressions: list(
        object({
          key: required(string(undefined, { maxLength: MAX_LABEL_KEY })),
          operator: required(enumOf(SELECTOR_OPERATORS)),
          values: list(string(undefined, { maxLength: MAX_LABEL_VALUE }), { maxItems: MAX_SELECTOR_TERMS }),
        }),
        { maxItems: MAX_SELECTOR_TERMS },
      ),
    },
    immutable ? { rules: (at) => [{ rule: 'self == oldSelf', message: `${at}: selector is immutable after creation.` }] } : {},
  );
}

/**
 * KubeVirt's admission: the selector must select the objects the template
 * makes ("selector does not match labels."), or they would never count.
 * `labels` is the template's labels as a CEL expression; the template must
 * have some (KubeVirt's controllers refuse a template without).
 */
function selectorMatches(at: string, labels: string, hasLabels: string): ValidationRule {
  const expression =
    "e.operator == 'In' ? (e.key in L && has(e.values) && L[e.key] in e.values) : " +
    "e.operator == 'NotIn' ? (!(e.key in L) || !has(e.values) || !(L[e.key] in e.values)) : " +
    "e.operator == 'Exists' ? e.key in L : !(e.key in L)";
  return {
    rule:
      `${hasLabels} && ` +
      `(!has(self.selector.matchLabels) || self.selector.matchLabels.all(k, k in ${labels} && ${labels}[k] == self.selector.matchLabels[k])) && ` +
      `(!has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, ${expression.replaceAll('L', labels)}))`,
    message: `${at}.selector: selector does not match labels.`,
    fieldPath: '.selector',
  };
}

export type ReplicaConditionType = 'ReplicaFailure' | 'ReplicaPaused' | (string & {});

/** KubeVirt's replica status: what the scale subresource reads (replicas, labelSelector) and readiness. */
export const replicaStatus = object(
  {
    /** The objects that count: managed, not final, not being deleted. */
    replicas: integer(undefined, { format: 'int32' }),
    readyReplicas: integer(undefined, { format: 'int32' }),
    conditions: list(condition<ReplicaConditionType>()),
    /** The selector in its canonical string form, for an HPA through the scale subresource. */
    labelSelector: string(),
  },
  { preserveUnknown: true },
);

const replicas = integer('Number of desired replicas; defaults to 1.', { format: 'int32', minimum: 0 });
const paused = boolean('Stop creating and deleting replicas; existing ones are left alone.');
const templateMetadata = object(
  { labels: labels(), annotations: stringMap(), name: string(), generateName: string() },
  { preserveUnknown: true },
);

export const vmirsSpec = object(
  {
    replicas,
    selector: required(labelSelector()),
    template: required(object({ metadata: templateMetadata, spec: required(vmiSpec) }, { description: 'The VMIs to make.' })),
    paused,
  },
  {
    description: 'VirtualMachineInstanceReplicaSetSpec',
    rules: (at) => [
      selectorMatches(at, 'self.template.metadata.labels', 'has(self.template.metadata) && has(self.template.metadata.labels)'),
    ],
  },
);

/** Pool VMs are taken out in this order; Random (KubeVirt's only order before 1.8, and its default since). */
export const SCALE_IN_SORT_POLICIES = ['Random', 'AscendingOrder', 'DescendingOrder', 'Newest', 'Oldest'] as const;
export type ScaleInSortPolicy = (typeof SCALE_IN_SORT_POLICIES)[number];

export const poolSpec = object(
  {
    replicas,
    selector: required(labelSelector(true)),
    virtualMachineTemplate: required(object({ metadata: templateMetadata, spec: required(vmSpec) }, { description: 'The VMs to make.' })),
    paused,
    nameGeneration: object({
      /** Each VM's configMap volumes name `<name>-<index>`. */
      appendIndexToConfigMapRefs: boolean(),
      /** Each VM's secret volumes and cloud-init secretRef/networkDataSecretRef name `<name>-<index>` (KubeVirt ≥ 1.8 for cloud-init). */
      appendIndexToSecretRefs: boolean(),
    }),
    scaleInStrategy: object({
      proactive: object({ selectionPolicy: object({ sortPolicy: enumOf(SCALE_IN_SORT_POLICIES) }) }),
    }),
  },
  {
    description: 'VirtualMachinePoolSpec',
    rules: (at) => [
      selectorMatches(
        at,
        'self.virtualMachineTemplate.metadata.labels',
        'has(self.virtualMachineTemplate.metadata) && has(self.virtualMachineTemplate.metadata.labels)',
      ),
    ],
  },
);
