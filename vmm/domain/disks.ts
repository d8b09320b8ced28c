// Disks, cdroms and the controller SCSI disks need. Paths come from the
// runtime (prepared by vmm/disks/), never from the spec, so a builder cannot
// point QEMU at an unprepared base image.
import { RuntimeMismatchError } from '../errors.js';
import type { DiskSpec } from '../spec.js';
import type { PreparedDisk } from './runtime.js';
import type { DiskDraft, DomainBuilder } from './draft.js';

/** libvirt's drive names: a..z, aa..az, ba.. (bijective base 26). */
export function driveSuffix(index: number): string {
  let suffix = '';
  for (let n = index + 1; n > 0; n = Math.floor((n - 1) / 26)) {
    suffix = String.fromCharCode(97 + ((n - 1) % 26)) + suffix;
  }
  return suffix;
}

function toDiskDraft(disk: DiskSpec, prepared: PreparedDisk, dev: string): DiskDraft {
  return {
    $: { type: prepared.block ? 'block' : 'file', device: disk.device },
    // discard=unmap lets guest TRIM keep qcow2 overlays and empty disks sparse.
    // cache and io: chosen for the path's file system when the disk was prepared (vmm/disks/driver-modes.ts).
    driver: {
      $: {
        name: 'qemu',
        type: prepared.format,
        cache: prepared.modes.cache,
        ...(prepared.modes.io ? { io: prepared.modes.io } : {}),
        ...(disk.device === 'disk' ? { discard: 'unmap' } : {}),
        // virtio only (validateVmSpec): the disk's requests run on this iothread, over this many virtqueues.
        ...(disk.ioThread !== undefined ? { iothread: disk.ioThread } : {}),
        ...(disk.queues !== undefined ? { queues: disk.queues } : {}),
      },
    },
    source: { $: prepared.block ? { dev: prepared.path } : { file: prepared.path } },
    target: { $: { dev, bus: disk.bus } },
    ...(disk.readOnly || disk.device === 'cdrom' ? { readonly: {} } : {}),
    ...(disk.bootOrder !== undefined ? { boot: { $: { order: disk.bootOrder } } } : {}),
    alias: { $: { name: `ua-disk-${disk.name}` } },
  };
}

export const configureDisks: DomainBuilder = (spec, _host, runtime, draft) => {
  // SATA and SCSI disks share the sd* namespace; target names must be unique per domain.
  const next = { vd: 0, sd: 0 };
  for (const disk of spec.disks) {
    const prepared = runtime.disks[disk.name];
    if (!prepared) throw new RuntimeMismatchError(`disk ${disk.name} was not prepared`);
    const prefix = disk.bus === 'virtio' ? 'vd' : 'sd';
    draft.devices.disk.push(toDiskDraft(disk, prepared, prefix + driveSuffix(next[prefix]++)));
  }
  if (spec.disks.some((d) => d.bus === 'scsi')) {
    draft.devices.controller.push({ $: { type: 'scsi', index: 0, model: 'virtio-scsi' } });
  }
};
