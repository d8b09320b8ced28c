// The cdi.kubevirt.io/v1beta1 DataVolume subset vkvm serves where CDI is not
// installed, with CDI's wire names (containerized-data-importer-api,
// pkg/apis/core/v1beta1/types.go): a claim and where its first bytes come
// from. The spec is typed whole, not preserved: a source or field vkvm does not
// realize (s3, upload, snapshot, sourceRef, preallocation, …) is refused by name
// under strict field validation (kubectl's default) rather than kept and
// ignored. What CEL can check is refused at admission, naming the field; what
// it cannot (a clone source in another namespace) the controller refuses.
import type { ValidationRule } from '../schema.js';
import { condition } from './condition.js';
import { enumOf, integer, list, object, opaque, quantity, required, string } from './field.js';

export const CDI_GROUP = 'cdi.kubevirt.io';
export const CDI_VERSION = 'v1beta1';
export const CDI_API_VERSION = `${CDI_GROUP}/${CDI_VERSION}` as const;
export const DATAVOLUME_PLURAL = 'datavolumes';

/** CDI's DataVolumePhase values. */
export const DATAVOLUME_PHASES = [
  'Pending',
  'WaitForFirstConsumer',
  'PVCBound',
  'ImportScheduled',
  'ImportInProgress',
  'CloneScheduled',
  'CloneInProgress',
  'Succeeded',
  'Failed',
  'Unknown',
] as const;
export type DataVolumePhase = (typeof DATAVOLUME_PHASES)[number];
export type DataVolumeConditionType = 'Bound' | 'Ready' | 'Running';

/** A source's field a node-side import cannot honour yet: refused at admission, naming it. */
const notSupported = (field: string, why: string): ((at: string) => ValidationRule) => {
  return (at) => ({ rule: `!has(self.${field})`, message: `${at}.${field}: ${why}`, fieldPath: `.${field}` });
};
const CERT_CONFIG_MAP_WHY =
  'a custom CA is not supported; the node verifies the source against its own trust store (leave certConfigMap out)';

const secretRef = string('A Secret of the DataVolume namespace holding the source credentials (CDI: accessKeyId and secretKey).');

export const dataVolumeSource = object(
  {
    /** An empty volume of the requested size. */
    blank: opaque('An empty volume; nothing to import.'),
    http: object(
      {
        url: required(string('The image URL (http or https): raw, qcow2, or either compressed with gzip or xz.')),
        secretRef,
        certConfigMap: string(),
      },
      { rules: (at) => [notSupported('certConfigMap', CERT_CONFIG_MAP_WHY)(at)] },
    ),
    registry: object(
      {
        url: required(string('The image as docker://host/repository:tag (or @digest): a containerDisk image.')),
        secretRef,
        /** pod or node: either way the node agent pulls it, through the node's image store and pull policy. */
        pullMethod: enumOf(['pod', 'node']),
        certConfigMap: string(),
      },
      { rules: (at) => [notSupported('certConfigMap', CERT_CONFIG_MAP_WHY)(at)] },
    ),
    pvc: object({
      /** Only the DataVolume's own namespace (the controller refuses another). */
      namespace: string(),
      name: required(string()),
    }),
  },
  {
    description: 'Where the volume content comes from: exactly one of blank, http, registry, pvc.',
    rules: (at) => [
      {
        rule: '[has(self.blank), has(self.http), has(self.registry), has(self.pvc)].filter(x, x).size() == 1',
        message: `${at}: exactly one of ${at}.blank, ${at}.http, ${at}.registry and ${at}.pvc is required`,
      },
    ],
  },
);

/** CDI's StorageSpec: the claim's spec with defaults (vkvm: ReadWriteOnce, Filesystem, the default class). */
export const dataVolumeStorage = object({
  accessModes: list(string()),
  volumeMode: enumOf(['Filesystem', 'Block']),
  resources: object({ requests: object({ storage: quantity() }) }),
  storageClassName: string(),
});

export const dataVolumeSpec = object(
  {
    source: required(dataVolumeSource),
    storage: dataVolumeStorage,
    /** A PersistentVolumeClaim spec, given to the claim as it is. */
    pvc: opaque<Record<string, unknown>>('A PersistentVolumeClaim spec, used verbatim for the claim.'),
    contentType: string('kubevirt (a VM disk image), the default; archive (a tar) is not supported.'),
  },
  {
    description: 'Specification of the DataVolume: its source and the claim it fills.',
    rules: (at) => [
      {
        rule: 'has(self.storage) != has(self.pvc)',
        message: `${at}: exactly one of ${at}.storage and ${at}.pvc is required`,
      },
      {
        rule: "!has(self.contentType) || self.contentType == 'kubevirt' || self.contentType == ''",
        message: `${at}.contentType: only kubevirt (a VM disk image) is supported`,
        fieldPath: '.contentType',
      },
      {
        rule: '!has(self.storage) || has(self.source.pvc) || (has(self.storage.resources) && has(self.storage.resources.requests) && has(self.storage.resources.requests.storage))',
        message: `${at}.storage.resources.requests.storage: a size is required (only a clone takes its source's)`,
        fieldPath: '.storage',
        reason: 'FieldValueRequired',
      },
    ],
  },
);

export const dataVolumeStatus = object(
  {
    phase: enumOf(DATAVOLUME_PHASES),
    /** "N/A", or the import's progress: "45.20%". */
    progress: string(),
    claimName: string(),
    restartCount: integer(),
    conditions: list(condition<DataVolumeConditionType>()),
  },
  { description: 'Written by the DataVolume controller only.' },
);
