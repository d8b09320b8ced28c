import t from 'tap';
import { SpecError } from '../errors.js';
import type { DiskSpec } from '../spec.js';
import { chooseDriverModes, type DiskFacts } from './driver-modes.js';

const file = (over: Partial<DiskFacts> = {}): DiskFacts => ({ block: false, directIo: true, preallocated: false, ...over });

t.test("chooseDriverModes: KubeVirt's choice where the VMI sets none, the VMI's where it does", async (t) => {
  const cases: Array<[string, Pick<DiskSpec, 'cache' | 'io'>, DiskFacts, object]> = [
    ['sparse file (an overlay) with O_DIRECT: none, default AIO', {}, file(), { cache: 'none' }],
    ['fully allocated file with O_DIRECT: none, native', {}, file({ preallocated: true }), { cache: 'none', io: 'native' }],
    ['block device with O_DIRECT: none, native', {}, file({ block: true }), { cache: 'none', io: 'native' }],
    ['no O_DIRECT (tmpfs): writethrough', {}, file({ directIo: false, preallocated: true }), { cache: 'writethrough' }],
    ['writeback asked: kept, no native', { cache: 'writeback' }, file({ block: true }), { cache: 'writeback' }],
    ['threads asked on a block device: kept', { io: 'threads' }, file({ block: true }), { cache: 'none', io: 'threads' }],
    ['native asked on a sparse file: kept', { io: 'native' }, file(), { cache: 'none', io: 'native' }],
    ['none asked where O_DIRECT works', { cache: 'none' }, file(), { cache: 'none' }],
  ];
  t.same(
    cases.map(([, disk, facts]) => chooseDriverModes(disk, facts, 'disks[0]')),
    cases.map(([, , , want]) => want),
  );
});

t.test('chooseDriverModes refuses what the node cannot give, naming the field', async (t) => {
  const causes = (disk: Pick<DiskSpec, 'cache' | 'io'>, facts: DiskFacts) => {
    try {
      chooseDriverModes(disk, facts, 'disks[1]');
      return 'accepted';
    } catch (err) {
      return err instanceof SpecError ? err.causes.map((c) => `${c.path} ${c.reason}`) : err;
    }
  };
  t.same(
    [
      causes({ cache: 'none' }, file({ directIo: false })),
      causes({ io: 'native' }, file({ directIo: false })),
      causes({ cache: 'writethrough', io: 'native' }, file()),
    ],
    [['disks[1].cache FieldValueInvalid'], ['disks[1].io FieldValueInvalid'], ['disks[1].io FieldValueInvalid']],
  );
});
