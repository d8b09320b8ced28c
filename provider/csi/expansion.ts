// Where a volume grows (design §3 and §6): in `controller` mode
// ControllerExpandVolume grows the file and the node side only makes the loop
// device and ext4 follow; in `node` mode the driver offers expansion on the
// Node service alone, so external-resizer takes its trivial path (PV capacity
// and the claim's FileSystemResizePending, no per-volume call) and
// NodeExpandVolume grows the file on the node that holds it. Pure.
import { CsiError } from './errors.js';
import { volumeSize } from './records.js';

export const EXPANSION_MODES = ['controller', 'node'] as const;
export type ExpansionMode = (typeof EXPANSION_MODES)[number];

/** The Controller service's capabilities for a mode: `EXPAND_VOLUME` only where the controller grows files. */
export function controllerCapabilities<T extends string>(all: readonly T[], mode: ExpansionMode): T[] {
  return mode === 'controller' ? [...all] : all.filter((c) => c !== 'EXPAND_VOLUME');
}

/** What NodeExpandVolume does to the file: leave it, or grow it to `toBytes`. */
export type FileGrowth = { kind: 'none' } | { kind: 'grow'; toBytes: number };

/**
 * The file's growth for a NodeExpandVolume asking `range` of a volume of `sizeBytes`, with `availableBytes`
 * not yet promised. A request no larger than the volume grows nothing (a retry after success, or a shrink,
 * which CSI has no call for). In controller mode a larger one is OUT_OF_RANGE: the controller grows first.
 */
export function nodeFileGrowth(
  mode: ExpansionMode,
  volume: { id: string; sizeBytes: number },
  range: { requiredBytes?: number; limitBytes?: number } | null | undefined,
  availableBytes: number,
): FileGrowth {
  if (!range?.requiredBytes || range.requiredBytes <= volume.sizeBytes) return { kind: 'none' };
  if (mode === 'controller')
    throw new CsiError(
      'OUT_OF_RANGE',
      `capacity_range.required_bytes: volume ${volume.id} is ${volume.sizeBytes} bytes; expand it through the controller first`,
    );
  const toBytes = volumeSize(range, volume.sizeBytes);
  if (toBytes - volume.sizeBytes > availableBytes)
    throw new CsiError('RESOURCE_EXHAUSTED', `${toBytes - volume.sizeBytes} more bytes asked, ${availableBytes} left`);
  return { kind: 'grow', toBytes };
}
