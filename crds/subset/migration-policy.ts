// The migrations.kubevirt.io/v1alpha1 MigrationPolicy subset: which VMIs a
// policy selects (namespace labels, VMI labels) and the settings it
// overrides; the rest of KubeVirt's spec (allowPostCopy, …) is kept as given.
import { boolean, integer, object, quantity, required, stringMap, unsupported } from './field.js';

export const migrationPolicySpec = object(
  {
    selectors: required(
      object(
        {
          namespaceSelector: stringMap('Labels the VMI namespace must carry.'),
          virtualMachineInstanceSelector: stringMap('Labels the VMI must carry.'),
        },
        { preserveUnknown: true },
      ),
    ),
    allowAutoConverge: boolean(),
    bandwidthPerMigration: quantity('Bytes per second; 0 is unlimited.'),
    completionTimeoutPerGiB: integer(undefined, { format: 'int64', minimum: 0 }),
    allowWorkloadDisruption: boolean(),
    /** vkvm runs pre-copy only. */
    allowPostCopy: unsupported(boolean()),
  },
  { preserveUnknown: true, description: 'MigrationPolicySpec' },
);

export const migrationPolicyStatus = object({}, { preserveUnknown: true });
