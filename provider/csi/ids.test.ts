import t from 'tap';
import { isSnapshotId, isVolumeId, newId, page, parseId } from './ids.js';

const HEX = '0123456789abcdef0123456789abcdef';

t.test('IDs: only vol- or snap- and 32 hex digits name an object; a path never does', async (t) => {
  const cases: Array<[string, string | undefined]> = [
    [`vol-${HEX}`, 'volume'],
    [`snap-${HEX}`, 'snapshot'],
    [`vol-${HEX.toUpperCase()}`, undefined],
    [`vol-${HEX}0`, undefined],
    [`vol-${HEX.slice(1)}`, undefined],
    [`../vol-${HEX}`, undefined],
    [`vol-${HEX}/../../etc`, undefined],
    [`disk-${HEX}`, undefined],
    ['', undefined],
    ['invalid-token', undefined],
  ];
  t.same(
    cases.map(([id]) => parseId(id)),
    cases.map(([, kind]) => kind),
  );
  t.ok(isVolumeId(`vol-${HEX}`) && !isVolumeId(`snap-${HEX}`) && isSnapshotId(`snap-${HEX}`));
});

t.test('newId makes an ID of its kind from 16 random bytes', async (t) => {
  const id = newId('volume', () => Buffer.from(HEX, 'hex'));
  t.same([id, parseId(id), parseId(newId('snapshot'))], [`vol-${HEX}`, 'volume', 'snapshot']);
});

t.test('page: sorted pages whose token is the next page first ID; a foreign token is refused', async (t) => {
  const ids = ['c', 'a', 'd', 'b'].map((c) => `vol-${c.repeat(32)}`);
  const [a, b, c, d] = [...ids].sort();
  t.same(page(ids, 'volume', '', 0), { ids: [a, b, c, d], nextToken: '' }, 'no limit: all');
  t.same(page(ids, 'volume', '', 2), { ids: [a, b], nextToken: c }, 'first page');
  t.same(page(ids, 'volume', c!, 2), { ids: [c, d], nextToken: '' }, 'last page');
  t.same(
    page(
      ids.filter((i) => i !== c),
      'volume',
      c!,
      0,
    ),
    { ids: [d], nextToken: '' },
    'the token entry deleted: the page starts after it',
  );
  t.same(page(ids, 'volume', `vol-${'f'.repeat(32)}`, 0), { ids: [], nextToken: '' }, 'past the end: empty');
  t.equal(page(ids, 'volume', 'invalid-token', 0), undefined, 'not a token this driver gives');
  t.equal(page(ids, 'snapshot', a!, 0), undefined, 'a volume ID is no snapshot token');
});
