// The claim a VMI volume reads: a persistentVolumeClaim's, or a dataVolume's,
// whose claim has the DataVolume's name (KubeVirt's semantics; CDI's claim).
import type { Volume } from './types.js';

export function volumeClaimName(volume: Volume): string | undefined {
  return volume.persistentVolumeClaim?.claimName || volume.dataVolume?.name || undefined;
}
