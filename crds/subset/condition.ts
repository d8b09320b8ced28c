// A status condition, as every kubevirt.io resource writes them.
import { alwaysSet, object, string, time } from './field.js';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** A status condition, of the resource's condition types `T`. */
export function condition<T extends string>() {
  return object(
    {
      type: alwaysSet(string<T>()),
      status: alwaysSet(string<ConditionStatus>()),
      reason: string(),
      message: string(),
      lastProbeTime: time(),
      lastTransitionTime: time(),
    },
    { preserveUnknown: true },
  );
}
