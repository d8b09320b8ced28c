// A VM's dataVolumeTemplates, as KubeVirt's VM controller handles them
// (pkg/virt-controller/watch/vm/vm.go handleDataVolumes): each becomes a
// DataVolume of its name in the VM's namespace, controlled by the VM, created
// before the VM's first VMI and kept across its restarts; the VM's deletion
// takes them (and through them their claims) with it (garbage collector).
// The VMI is made once every DataVolume can serve it: done, or waiting for
// its first consumer, which is the VMI itself (a WaitForFirstConsumer claim
// is bound, and an http or registry source imported, on the node that runs
// it). Whoever serves DataVolumes (vkvm's controller, or CDI) does the rest.
import { controllerRefTo } from '../kubevirt/controller-ref.js';
import type { CustomObjectsApi } from '@kubernetes/client-node';
import { isConflict, isNotFound } from '../kube/errors.js';
import { objectKey } from '../kube/informer.js';
import { CDI_API_VERSION, type DataVolume, type DataVolumePhase } from '../kubevirt/datavolume-types.js';
import { KUBEVIRT_API_VERSION, type VirtualMachine } from '../kubevirt/types.js';
import { DATAVOLUMES } from './datavolumes/datavolume-controller.js';

/** The DataVolumes a VM's templates make. Pure. */
export function dataVolumesOf(vm: VirtualMachine): DataVolume[] {
  return (vm.spec.dataVolumeTemplates ?? []).map((template) => ({
    apiVersion: CDI_API_VERSION,
    kind: 'DataVolume',
    metadata: {
      name: template.metadata.name,
      namespace: vm.metadata.namespace ?? 'default',
      ...(template.metadata.labels ? { labels: { ...template.metadata.labels } } : {}),
      ...(template.metadata.annotations ? { annotations: { ...template.metadata.annotations } } : {}),
      ownerReferences: [controllerRefTo(vm, KUBEVIRT_API_VERSION, 'VirtualMachine')],
    },
    spec: structuredClone(template.spec),
  }));
}

/** The `ns/name` key of the VM controlling `dv` (its dataVolumeTemplates made it), if one does. Pure. */
export function vmKeyOfDataVolume(dv: DataVolume): string | undefined {
  const ref = dv.metadata.ownerReferences?.find(
    (r) => r.controller && r.kind === 'VirtualMachine' && r.apiVersion.startsWith('kubevirt.io/'),
  );
  return ref ? objectKey(dv.metadata.namespace ?? 'default', ref.name) : undefined;
}

/** Phases in which a DataVolume can serve a VMI that is about to be made (its import, if any, runs on that VMI's node). */
const SERVES_A_NEW_VMI: ReadonlySet<DataVolumePhase> = new Set([
  'Succeeded',
  'WaitForFirstConsumer',
  'PVCBound',
  'ImportScheduled',
  'ImportInProgress',
]);

/** How a VM's DataVolumes stand for its next VMI: `ready`, still `provisioning`, or one `failed` (named). */
export type DataVolumesState =
  { state: 'ready' } | { state: 'provisioning'; waitingFor: string } | { state: 'failed'; name: string; message: string };

/** Pure: the first DataVolume not ready decides. */
export function dataVolumesState(dvs: ReadonlyArray<DataVolume | undefined>, names: readonly string[]): DataVolumesState {
  for (const [i, dv] of dvs.entries()) {
    const name = names[i] ?? '';
    if (!dv) return { state: 'provisioning', waitingFor: name };
    const phase = dv.status?.phase;
    if (phase === 'Failed') {
      const ready = dv.status?.conditions?.find((c) => c.type === 'Ready');
      return { state: 'failed', name, message: ready?.message ?? `DataVolume ${name} failed` };
    }
    if (!phase || !SERVES_A_NEW_VMI.has(phase)) return { state: 'provisioning', waitingFor: name };
  }
  return { state: 'ready' };
}

/** The VM controller's calls for DataVolumes (the custom-objects API stays here). */
export class VmDataVolumes {
  constructor(private readonly api: CustomObjectsApi) {}

  /**
   * Makes each of the VM's DataVolumes that is missing, and returns them all as they are now (undefined: not
   * there; a DataVolume of that name the VM does not control counts as not there: KubeVirt waits too).
   */
  async ensure(vm: VirtualMachine): Promise<Array<DataVolume | undefined>> {
    return Promise.all(
      dataVolumesOf(vm).map(async (want) => {
        const namespace = want.metadata.namespace!;
        const name = want.metadata.name!;
        let dv = await this.read(namespace, name);
        if (!dv) {
          try {
            // Strict: a field the DataVolume CRD does not know is refused by name, not dropped.
            dv = (await this.api.createNamespacedCustomObject({
              ...DATAVOLUMES,
              namespace,
              body: want,
              fieldValidation: 'Strict',
            })) as DataVolume;
          } catch (err) {
            if (!isConflict(err)) throw err;
            dv = await this.read(namespace, name);
          }
        }
        const owned = dv?.metadata.ownerReferences?.some((r) => r.controller && r.uid === vm.metadata.uid);
        return owned ? dv : undefined;
      }),
    );
  }

  private async read(namespace: string, name: string): Promise<DataVolume | undefined> {
    try {
      return (await this.api.getNamespacedCustomObject({ ...DATAVOLUMES, namespace, name })) as DataVolume;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }
}
