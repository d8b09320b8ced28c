// The cdi.kubevirt.io/v1beta1 DataVolume types, derived from their subset
// table (crds/subset/datavolume.ts) as types.ts derives the VM's and VMI's.
import type { TypeOf } from '../../crds/subset/field.js';
import type { dataVolumeSource, dataVolumeSpec, dataVolumeStatus, dataVolumeStorage } from '../../crds/subset/datavolume.js';
import type { ObjectMeta } from './types.js';
import { CDI_GROUP, DATAVOLUME_PLURAL } from '../../crds/subset/datavolume.js';

export {
  CDI_API_VERSION,
  CDI_GROUP,
  CDI_VERSION,
  DATAVOLUME_PHASES,
  DATAVOLUME_PLURAL,
  type DataVolumeConditionType,
  type DataVolumePhase,
} from '../../crds/subset/datavolume.js';

/** The CRD's name, as vkvm up installs it where CDI is not installed. */
export const DATAVOLUME_CRD_NAME = `${DATAVOLUME_PLURAL}.${CDI_GROUP}`;

export type DataVolumeSpec = TypeOf<typeof dataVolumeSpec>;
export type DataVolumeSource = TypeOf<typeof dataVolumeSource>;
export type DataVolumeStorage = TypeOf<typeof dataVolumeStorage>;
export type DataVolumeStatus = TypeOf<typeof dataVolumeStatus>;

export interface DataVolume {
  apiVersion?: string;
  kind?: 'DataVolume';
  metadata: ObjectMeta;
  spec: DataVolumeSpec;
  status?: DataVolumeStatus;
}
