// The state one VMI translation accumulates: every cause (translation reports
// them all, not the first), the unsupported fields it decided on by value,
// and where each VmSpec disk and interface came from, so causes vmm's own
// validation finds can be reported at the KubeVirt field that produced them.
import type { SpecCause, SpecCauseReason } from '../../vmm/errors.js';
import type { DiskSpec, InterfaceSpec, KernelBoot } from '../../vmm/spec.js';
import type { Quantity } from './types.js';
import type { CsiVolume } from '../csi-node/volume.js';

/**
 * A PVC bound to a PersistentVolume this node serves VM disks from, resolved
 * by the caller (claims.ts claimOnNode): a local or hostPath PV is a path on
 * the node; a CSI PV is staged and published by the node agent before the VM
 * starts (provider/csi-node/), at `diskPath`.
 */
export type BoundClaim =
  | {
      kind: 'hostPath';
      /** The PV's path on this node: a directory (Filesystem) or a block device (Block). */
      hostPath: string;
      volumeMode: 'Filesystem' | 'Block';
      /** status.capacity.storage of the claim: the size of the disk.img made in an empty Filesystem volume. */
      capacity?: Quantity;
    }
  | {
      kind: 'csi';
      volume: CsiVolume;
      /** The disk as published for the pod: the device (Block) or disk.img inside the published directory. */
      diskPath: string;
      volumeMode: 'Filesystem' | 'Block';
      capacity?: Quantity;
    };

/** A claim bound to a PersistentVolume this node cannot serve VM disks from (a CSI or network volume): the reason, for the claim's field. */
export interface UnservableClaim {
  unservable: string;
}

/** Everything translation needs that takes I/O to learn, resolved by the caller (see vmiReferences). */
export interface VmiTranslateContext {
  /** Secrets in the VMI's namespace by name: key → decoded (UTF-8) value. */
  secrets: Readonly<Record<string, Readonly<Record<string, string>>>>;
  /** PersistentVolumeClaims in the VMI's namespace by claim name (claims.ts claimOnNode). */
  pvcs: Readonly<Record<string, BoundClaim | UnservableClaim>>;
  /** Binding of the interface added when the VMI names none (KubeVirt's defaultNetworkInterface; default bridge). */
  defaultInterfaceBinding?: 'bridge' | 'masquerade';
}

/** Where a VmSpec disk came from. */
export interface DiskOrigin {
  /** spec.domain.devices.disks[i] */
  disk: string;
  device: 'disk' | 'cdrom';
  /** The volume field that holds the disk's source, e.g. spec.volumes[2].containerDisk.image. */
  source: string;
}

export interface KernelBootOrigin {
  image: string;
  kernelPath: string;
  initrdPath: string;
}

export interface Draft {
  readonly ctx: VmiTranslateContext;
  readonly causes: SpecCause[];
  /** Fields vkvm ignores because of their value (the schema walk finds the rest). */
  readonly unsupported: string[];
  readonly disks: DiskSpec[];
  readonly diskOrigins: DiskOrigin[];
  readonly interfaces: InterfaceSpec[];
  /** spec.domain.devices.interfaces[i], per VmSpec interface. */
  readonly interfaceOrigins: string[];
  kernelBoot?: KernelBoot;
  kernelBootOrigin?: KernelBootOrigin;
  report(path: string, reason: SpecCauseReason, message: string): void;
}

export function newDraft(ctx: VmiTranslateContext): Draft {
  const causes: SpecCause[] = [];
  return {
    ctx,
    causes,
    unsupported: [],
    disks: [],
    diskOrigins: [],
    interfaces: [],
    interfaceOrigins: [],
    report: (path, reason, message) => void causes.push({ path, reason, message }),
  };
}
