// spec.volumes of a VMI: where each disk's bytes come from (the disk of the
// same name, devices.ts, says how the guest sees them).
import { PRESERVED, name } from './common.js';
import { boolean, enumOf, object, open, quantity, required, string, unsupported } from './field.js';

const localObjectReference = object({ name: required(string()) });

export const cloudInitNoCloud = object(
  {
    userData: string(),
    userDataBase64: string(),
    networkData: string(),
    networkDataBase64: string(),
    /** A Secret holding the user data under key "userdata" (or "userData"). */
    secretRef: localObjectReference,
    /** A Secret holding the network data under key "networkdata" (or "networkData"). */
    networkDataSecretRef: localObjectReference,
  },
  { preserveUnknown: true },
);

export const volume = object(
  {
    /** Must match a disk's name. Exactly one source below. */
    name: name('volume; the disk of the same name uses it'),
    containerDisk: object(
      {
        image: required(string('OCI image holding the disk image.')),
        imagePullPolicy: string(),
        /** The disk file in the image; absent: the one file under /disk. */
        path: string(),
        /** A Secret (kubernetes.io/dockerconfigjson) of the VMI's namespace; one of the launcher pod's imagePullSecrets. */
        imagePullSecret: string(),
      },
      { preserveUnknown: true },
    ),
    cloudInitNoCloud,
    emptyDisk: object({ capacity: required(quantity()) }, { preserveUnknown: true }),
    persistentVolumeClaim: object({ claimName: required(string()), readOnly: boolean() }, { preserveUnknown: true }),
    /** A DataVolume (cdi.kubevirt.io) of the VMI's namespace: its claim, of the same name, as KubeVirt uses it. */
    dataVolume: object({ name: required(string()), hotpluggable: unsupported(boolean()) }, { preserveUnknown: true }),
    hostDisk: object(
      {
        /** The disk image file on the node. */
        path: required(string()),
        /** Disk: the file must exist; DiskOrCreate: a sparse file of `capacity` is made if it does not. */
        type: required(open(enumOf(['Disk', 'DiskOrCreate']))),
        capacity: quantity(),
      },
      { preserveUnknown: true },
    ),
  },
  { preserveUnknown: true, description: PRESERVED },
);
