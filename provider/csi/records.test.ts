import t from 'tap';
import { CsiError } from './errors.js';
import {
  availableBytes,
  capabilityProblem,
  GIB,
  MIB,
  sameVolume,
  topologyAllows,
  volumeModeOf,
  volumeSize,
  type VolumeRecord,
  type WireCapability,
} from './records.js';

const codeOf = (fn: () => unknown): string => {
  try {
    fn();
    return 'ok';
  } catch (err) {
    return err instanceof CsiError ? err.code : String(err);
  }
};

t.test('volumeSize: required (or the default within the limit), rounded up to whole MiB; OUT_OF_RANGE otherwise', async (t) => {
  const cases: Array<[{ requiredBytes?: number; limitBytes?: number } | undefined, number | string]> = [
    [undefined, GIB],
    [{}, GIB],
    [{ requiredBytes: 10 * GIB }, 10 * GIB],
    [{ requiredBytes: 10 * GIB, limitBytes: 10 * GIB }, 10 * GIB],
    [{ requiredBytes: 1 }, MIB],
    [{ requiredBytes: MIB + 1 }, 2 * MIB],
    [{ limitBytes: 64 * MIB }, 64 * MIB],
    [{ requiredBytes: MIB + 1, limitBytes: MIB + 100 }, 'OUT_OF_RANGE'],
    [{ requiredBytes: 2 * GIB, limitBytes: GIB }, 'OUT_OF_RANGE'],
    [{ requiredBytes: -1 }, 'OUT_OF_RANGE'],
  ];
  t.same(
    cases.map(([range]) => {
      try {
        return volumeSize(range, GIB);
      } catch (err) {
        return (err as CsiError).code;
      }
    }),
    cases.map(([, want]) => want),
  );
});

t.test('availableBytes: capacity less every volume and snapshot at full size and what creations hold; never below 0', async (t) => {
  t.same(
    [
      availableBytes(10 * GIB, [], []),
      availableBytes(10 * GIB, [{ sizeBytes: GIB }, { sizeBytes: 2 * GIB }], [{ sizeBytes: GIB }]),
      availableBytes(10 * GIB, [{ sizeBytes: GIB }], [], 4 * GIB),
      availableBytes(GIB, [{ sizeBytes: 2 * GIB }], []),
    ],
    [10 * GIB, 6 * GIB, 5 * GIB, 0],
  );
});

const mount = (mode: string, fsType = ''): WireCapability => ({ accessType: 'mount', mount: { fsType }, accessMode: { mode } });
const block = (mode: string): WireCapability => ({ accessType: 'block', block: {}, accessMode: { mode } });

t.test('capabilityProblem names the field of what one node cannot serve', async (t) => {
  t.same(
    [
      capabilityProblem(mount('SINGLE_NODE_WRITER'), 'c'),
      capabilityProblem(block('SINGLE_NODE_SINGLE_WRITER'), 'c'),
      capabilityProblem(mount('SINGLE_NODE_READER_ONLY', 'ext4'), 'c'),
      capabilityProblem(mount('MULTI_NODE_MULTI_WRITER'), 'c'),
      capabilityProblem(mount('SINGLE_NODE_WRITER', 'ntfs'), 'c'),
      capabilityProblem({ accessMode: { mode: 'SINGLE_NODE_WRITER' } }, 'c'),
      capabilityProblem(block('UNKNOWN'), 'c'),
      capabilityProblem(undefined, 'c'),
    ],
    [
      undefined,
      undefined,
      undefined,
      'c.access_mode: MULTI_NODE_MULTI_WRITER is not offered (a volume lives on one node)',
      'c.mount.fs_type: ntfs is not offered (ext4)',
      'c: access_type (block or mount) is required',
      'c.access_mode: required',
      'c: missing',
    ],
  );
});

t.test('volumeModeOf: one mode for all capabilities, INVALID_ARGUMENT for none, a bad one or a mix', async (t) => {
  t.same(
    [
      volumeModeOf([mount('SINGLE_NODE_WRITER')]),
      volumeModeOf([block('SINGLE_NODE_WRITER'), block('SINGLE_NODE_READER_ONLY')]),
      codeOf(() => volumeModeOf([])),
      codeOf(() => volumeModeOf(undefined)),
      codeOf(() => volumeModeOf([mount('SINGLE_NODE_WRITER'), block('SINGLE_NODE_WRITER')])),
      codeOf(() => volumeModeOf([mount('MULTI_NODE_READER_ONLY')])),
    ],
    ['filesystem', 'block', 'INVALID_ARGUMENT', 'INVALID_ARGUMENT', 'INVALID_ARGUMENT', 'INVALID_ARGUMENT'],
  );
});

t.test('topologyAllows: no requisite, or one whose segments all match this node', async (t) => {
  const ours = { 'topology.vkvm.io/node': 'a' };
  t.same(
    [
      topologyAllows(undefined, ours),
      topologyAllows([], ours),
      topologyAllows([{ segments: { 'topology.vkvm.io/node': 'b' } }, { segments: { 'topology.vkvm.io/node': 'a' } }], ours),
      topologyAllows([{ segments: { 'topology.vkvm.io/node': 'b' } }], ours),
      topologyAllows([{ segments: { 'topology.vkvm.io/node': 'a', zone: 'z1' } }], ours),
      topologyAllows([{ segments: {} }], ours),
    ],
    [true, true, true, false, false, true],
  );
});

t.test('sameVolume: a repeated CreateVolume matches on mode, source and a size within the range', async (t) => {
  const v: VolumeRecord = { id: 'vol-x', name: 'n', sizeBytes: GIB, mode: 'block', createdAtMs: 0, node: { phase: 'unstaged' } };
  const src = { ...v, source: { kind: 'volume' as const, id: 'vol-y' } };
  t.same(
    [
      sameVolume(v, { mode: 'block', requiredBytes: GIB, limitBytes: 0 }),
      sameVolume(v, { mode: 'block', requiredBytes: 0, limitBytes: 2 * GIB }),
      sameVolume(v, { mode: 'block', requiredBytes: 2 * GIB, limitBytes: 0 }),
      sameVolume(v, { mode: 'block', requiredBytes: 0, limitBytes: MIB }),
      sameVolume(v, { mode: 'filesystem', requiredBytes: GIB, limitBytes: 0 }),
      sameVolume(src, { mode: 'block', requiredBytes: 0, limitBytes: 0, source: { kind: 'volume', id: 'vol-y' } }),
      sameVolume(src, { mode: 'block', requiredBytes: 0, limitBytes: 0, source: { kind: 'snapshot', id: 'vol-y' } }),
      sameVolume(src, { mode: 'block', requiredBytes: 0, limitBytes: 0 }),
    ],
    [true, true, false, false, false, true, false, false],
  );
});
