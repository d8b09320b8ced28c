import t from 'tap';
import { CsiError } from './errors.js';
import { controllerCapabilities, nodeFileGrowth, type ExpansionMode } from './expansion.js';

const MIB = 2 ** 20;

t.test('controllerCapabilities: EXPAND_VOLUME only in controller mode', async (t) => {
  const all = ['CREATE_DELETE_VOLUME', 'EXPAND_VOLUME', 'GET_CAPACITY'] as const;
  t.same(
    { controller: controllerCapabilities(all, 'controller'), node: controllerCapabilities(all, 'node') },
    { controller: ['CREATE_DELETE_VOLUME', 'EXPAND_VOLUME', 'GET_CAPACITY'], node: ['CREATE_DELETE_VOLUME', 'GET_CAPACITY'] },
  );
});

t.test('nodeFileGrowth: what NodeExpandVolume does to the file, by mode', async (t) => {
  const vol = { id: 'vol-1', sizeBytes: 64 * MIB };
  const cases: Array<[string, ExpansionMode, { requiredBytes?: number; limitBytes?: number } | null, number, string]> = [
    ['no range: nothing to grow', 'node', null, 0, 'none'],
    ['the size it has: a retry after success', 'node', { requiredBytes: 64 * MIB }, 0, 'none'],
    ['smaller: no shrink', 'node', { requiredBytes: 32 * MIB }, 0, 'none'],
    ['larger, node mode: grown to whole MiB', 'node', { requiredBytes: 96 * MIB + 1 }, 100 * MIB, `grow ${97 * MIB}`],
    ['larger than what is left', 'node', { requiredBytes: 128 * MIB }, 32 * MIB, 'RESOURCE_EXHAUSTED'],
    ['larger, controller mode: the controller grows first', 'controller', { requiredBytes: 128 * MIB }, 100 * MIB, 'OUT_OF_RANGE'],
    ['the same size, controller mode', 'controller', { requiredBytes: 64 * MIB }, 0, 'none'],
    ['required beyond limit', 'node', { requiredBytes: 128 * MIB, limitBytes: 100 * MIB }, 100 * MIB, 'OUT_OF_RANGE'],
  ];
  t.same(
    cases.map(([, mode, range, available]) => {
      try {
        const g = nodeFileGrowth(mode, vol, range, available);
        return g.kind === 'grow' ? `grow ${g.toBytes}` : g.kind;
      } catch (err) {
        return err instanceof CsiError ? err.code : String(err);
      }
    }),
    cases.map((c) => c[4]),
    cases.map((c) => c[0]).join('; '),
  );
});
