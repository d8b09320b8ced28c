// The kubevirt.io/v1 VirtualMachine, VirtualMachineInstance,
// VirtualMachineInstanceMigration and VirtualMachineInstanceReplicaSet CRDs,
// the migrations.kubevirt.io MigrationPolicy and pool.kubevirt.io
// VirtualMachinePool CRDs vkvm installs: names, printer columns and subresources as KubeVirt defines them
// (pkg/virt-operator/resource/generate/components/crds.go), around the schema
// of the subset table (crds/subset/), which types the subset vkvm runs,
// preserves everything else, and carries CEL rules for the admission checks
// KubeVirt's webhook would otherwise make.
import type { JsonSchema } from './schema.js';
import {
  GROUP,
  MIGRATION_POLICY_PLURAL,
  MIGRATIONS_GROUP,
  MIGRATIONS_VERSION,
  VERSION,
  VM_PLURAL,
  VMI_PLURAL,
  VMIM_PLURAL,
} from './subset/constants.js';
import { vmimSpec, vmimStatus } from './subset/migration.js';
import { migrationPolicySpec, migrationPolicyStatus } from './subset/migration-policy.js';
import { object, required, schemaAt, string, type Field } from './subset/field.js';
import { vmiStatus, vmStatus } from './subset/status.js';
import { POOL_GROUP, POOL_PLURAL, POOL_VERSION, poolSpec, replicaStatus, VMIRS_PLURAL, vmirsSpec } from './subset/replicas.js';
import { vmSpec } from './subset/vm.js';
import {
  INSTANCETYPE_GROUP,
  INSTANCETYPE_KINDS,
  INSTANCETYPE_VERSION,
  instancetypeSpec,
  preferenceSpec,
  type InstancetypeKind,
} from './subset/instancetype.js';
import { vmiSpec } from './subset/vmi.js';
import { CDI_GROUP, CDI_VERSION, DATAVOLUME_PLURAL, dataVolumeSpec, dataVolumeStatus } from './subset/datavolume.js';

// A minimal CRD type with the wire names, so the object serialises as is.
export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string; labels: Record<string, string> };
  spec: {
    group: string;
    names: { kind: string; listKind: string; plural: string; singular: string; shortNames: string[]; categories: string[] };
    scope: 'Namespaced' | 'Cluster';
    versions: Array<{
      name: string;
      served: boolean;
      storage: boolean;
      subresources?: {
        status: Record<string, never>;
        scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath: string };
      };
      additionalPrinterColumns: Array<{ name: string; type: string; jsonPath: string; description?: string; priority?: number }>;
      selectableFields?: Array<{ jsonPath: string }>;
      schema: { openAPIV3Schema: JsonSchema };
    }>;
  };
}

// ---- CRDs ----

function topLevel(spec: Field, status: Field | undefined, description: string): JsonSchema {
  const resource = object(
    { apiVersion: string(), kind: string(), metadata: object({}), spec: required(spec), ...(status ? { status } : {}) },
    { description },
  );
  return schemaAt(resource.schema!, '');
}

function crd(opts: {
  group?: string;
  version?: string;
  scope?: 'Namespaced' | 'Cluster';
  kind: string;
  plural: string;
  shortNames: string[];
  columns: CustomResourceDefinition['spec']['versions'][number]['additionalPrinterColumns'];
  selectableFields?: string[];
  /** The scale subresource over spec.replicas and status.replicas/labelSelector (kubectl scale, an HPA). */
  scalable?: boolean;
  /** No status subresource (KubeVirt's instancetypes and preferences have no status). */
  noStatus?: boolean;
  categories?: string[];
  schema: JsonSchema;
}): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${opts.plural}.${opts.group ?? GROUP}`, labels: { 'app.kubernetes.io/part-of': 'vkvm' } },
    spec: {
      group: opts.group ?? GROUP,
      names: {
        kind: opts.kind,
        listKind: `${opts.kind}List`,
        plural: opts.plural,
        singular: opts.kind.toLowerCase(),
        shortNames: opts.shortNames,
        categories: opts.categories ?? ['all'],
      },
      scope: opts.scope ?? 'Namespaced',
      versions: [
        {
          name: opts.version ?? VERSION,
          served: true,
          storage: true,
          ...(opts.noStatus
            ? {}
            : {
                subresources: {
                  status: {},
                  ...(opts.scalable
                    ? {
                        scale: {
                          specReplicasPath: '.spec.replicas',
                          statusReplicasPath: '.status.replicas',
                          labelSelectorPath: '.status.labelSelector',
                        },
                      }
                    : {}),
                },
              }),
          additionalPrinterColumns: opts.columns,
          ...(opts.selectableFields ? { selectableFields: opts.selectableFields.map((jsonPath) => ({ jsonPath })) } : {}),
          schema: { openAPIV3Schema: opts.schema },
        },
      ],
    },
  };
}

const AGE = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };
const READY = { name: 'Ready', type: 'string', jsonPath: ".status.conditions[?(@.type=='Ready')].status" };

export function virtualMachineCrd(): CustomResourceDefinition {
  return crd({
    kind: 'VirtualMachine',
    plural: VM_PLURAL,
    shortNames: ['vm', 'vms'],
    columns: [AGE, { name: 'Status', type: 'string', jsonPath: '.status.printableStatus', description: 'Human Readable Status' }, READY],
    schema: topLevel(vmSpec, vmStatus, 'VirtualMachine (kubevirt.io/v1) handles a VirtualMachineInstance: starts, stops and restarts it.'),
  });
}

export function virtualMachineInstanceCrd(): CustomResourceDefinition {
  return crd({
    kind: 'VirtualMachineInstance',
    plural: VMI_PLURAL,
    shortNames: ['vmi', 'vmis'],
    columns: [
      AGE,
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'IP', type: 'string', jsonPath: '.status.interfaces[0].ipAddress' },
      { name: 'NodeName', type: 'string', jsonPath: '.status.nodeName' },
      READY,
      { name: 'Live-Migratable', type: 'string', jsonPath: ".status.conditions[?(@.type=='LiveMigratable')].status", priority: 1 },
      { name: 'Paused', type: 'string', jsonPath: ".status.conditions[?(@.type=='Paused')].status", priority: 1 },
    ],
    // kubectl get vmi --field-selector status.nodeName=<node>: the VMIs of one node (virt-handler's label selector).
    selectableFields: ['.status.nodeName'],
    schema: topLevel(vmiSpec, vmiStatus, 'VirtualMachineInstance (kubevirt.io/v1) is one running virtual machine.'),
  });
}

export function virtualMachineInstanceMigrationCrd(): CustomResourceDefinition {
  return crd({
    kind: 'VirtualMachineInstanceMigration',
    plural: VMIM_PLURAL,
    shortNames: ['vmim', 'vmims'],
    columns: [
      { name: 'Phase', type: 'string', jsonPath: '.status.phase', description: 'The current phase of VM instance migration' },
      { name: 'VMI', type: 'string', jsonPath: '.spec.vmiName', description: 'The name of the VMI to perform the migration on' },
    ],
    schema: topLevel(vmimSpec, vmimStatus, 'VirtualMachineInstanceMigration (kubevirt.io/v1) moves a running VMI to another node.'),
  });
}

export function migrationPolicyCrd(): CustomResourceDefinition {
  return crd({
    group: MIGRATIONS_GROUP,
    version: MIGRATIONS_VERSION,
    scope: 'Cluster',
    kind: 'MigrationPolicy',
    plural: MIGRATION_POLICY_PLURAL,
    shortNames: [],
    columns: [AGE],
    schema: topLevel(
      migrationPolicySpec,
      migrationPolicyStatus,
      'MigrationPolicy (migrations.kubevirt.io/v1alpha1) overrides the migration settings for the VMIs it selects.',
    ),
  });
}

/** KubeVirt's columns of a replicated kind: desired, current and ready `what`s. */
const replicaColumns = (what: string) => [
  { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas', description: `Number of desired ${what}` },
  { name: 'Current', type: 'integer', jsonPath: '.status.replicas', description: `Number of managed and not final or deleted ${what}` },
  {
    name: 'Ready',
    type: 'integer',
    jsonPath: '.status.readyReplicas',
    description: `Number of managed ${what} which are ready to receive traffic`,
  },
  AGE,
];

export function virtualMachineInstanceReplicaSetCrd(): CustomResourceDefinition {
  return crd({
    kind: 'VirtualMachineInstanceReplicaSet',
    plural: VMIRS_PLURAL,
    shortNames: ['vmirs', 'vmirss'],
    columns: replicaColumns('VirtualMachineInstances'),
    scalable: true,
    schema: topLevel(vmirsSpec, replicaStatus, 'VirtualMachineInstanceReplicaSet (kubevirt.io/v1) keeps a number of VMIs of one template.'),
  });
}

export function virtualMachinePoolCrd(): CustomResourceDefinition {
  return crd({
    group: POOL_GROUP,
    version: POOL_VERSION,
    kind: 'VirtualMachinePool',
    plural: POOL_PLURAL,
    shortNames: ['vmpool', 'vmpools'],
    columns: replicaColumns('VirtualMachines'),
    scalable: true,
    schema: topLevel(
      poolSpec,
      replicaStatus,
      'VirtualMachinePool (pool.kubevirt.io/v1alpha1) keeps a number of indexed VMs of one template.',
    ),
  });
}

/** Short names and categories as KubeVirt's crds.go gives them. */
const INSTANCETYPE_NAMES: Record<InstancetypeKind, { shortNames: string[]; categories: string[] }> = {
  VirtualMachineInstancetype: { shortNames: ['vminstancetype', 'vminstancetypes', 'vmf', 'vmfs'], categories: ['all'] },
  VirtualMachineClusterInstancetype: { shortNames: ['vmclusterinstancetype', 'vmclusterinstancetypes', 'vmcf', 'vmcfs'], categories: [] },
  VirtualMachinePreference: { shortNames: ['vmpref', 'vmprefs', 'vmp', 'vmps'], categories: ['all'] },
  VirtualMachineClusterPreference: { shortNames: ['vmcp', 'vmcps'], categories: [] },
};

/** The four instancetype.kubevirt.io/v1beta1 CRDs (only v1beta1 is served; KubeVirt also serves the deprecated v1alpha1/2). */
export function instancetypeCrds(): CustomResourceDefinition[] {
  return (Object.keys(INSTANCETYPE_KINDS) as InstancetypeKind[]).map((kind) => {
    const { plural, cluster } = INSTANCETYPE_KINDS[kind];
    const isPreference = kind.endsWith('Preference');
    return crd({
      group: INSTANCETYPE_GROUP,
      version: INSTANCETYPE_VERSION,
      scope: cluster ? 'Cluster' : 'Namespaced',
      kind,
      plural,
      ...INSTANCETYPE_NAMES[kind],
      noStatus: true,
      columns: [AGE],
      schema: topLevel(
        isPreference ? preferenceSpec : instancetypeSpec,
        undefined,
        `${kind} (${INSTANCETYPE_GROUP}/${INSTANCETYPE_VERSION}): ${isPreference ? 'preferred settings for' : 'the resources of'} the VMs that name it.`,
      ),
    });
  });
}

/**
 * CDI's DataVolume (cdi.kubevirt.io/v1beta1), names and columns as CDI's
 * operator defines them; installed only where CDI is not (provider/cli/up.ts).
 */
export function dataVolumeCrd(): CustomResourceDefinition {
  return crd({
    group: CDI_GROUP,
    version: CDI_VERSION,
    kind: 'DataVolume',
    plural: DATAVOLUME_PLURAL,
    shortNames: ['dv', 'dvs'],
    columns: [
      { name: 'Phase', type: 'string', jsonPath: '.status.phase', description: 'The phase the data volume is in' },
      {
        name: 'Progress',
        type: 'string',
        jsonPath: '.status.progress',
        description: 'Transfer progress in percentage if known, N/A otherwise',
      },
      {
        name: 'Restarts',
        type: 'integer',
        jsonPath: '.status.restartCount',
        description: 'The number of times the transfer has been restarted.',
      },
      AGE,
    ],
    schema: topLevel(
      dataVolumeSpec,
      dataVolumeStatus,
      'DataVolume (cdi.kubevirt.io/v1beta1) is a PersistentVolumeClaim and where its first bytes come from.',
    ),
  });
}

/** The CRDs of another project's API vkvm serves only where that project is not installed. */
export function optionalCrds(): CustomResourceDefinition[] {
  return [dataVolumeCrd()];
}

/** Every CRD vkvm installs, in the order it applies them. */
export function allCrds(): CustomResourceDefinition[] {
  return [
    virtualMachineCrd(),
    virtualMachineInstanceCrd(),
    virtualMachineInstanceMigrationCrd(),
    migrationPolicyCrd(),
    virtualMachineInstanceReplicaSetCrd(),
    virtualMachinePoolCrd(),
    ...instancetypeCrds(),
    ...optionalCrds(),
  ];
}
