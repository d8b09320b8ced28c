import t from 'tap';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { migrationRefusal } from './admission.js';

const vmi = (status: VirtualMachineInstance['status']): VirtualMachineInstance => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vmi-1' },
  spec: { domain: {} },
  status,
});
const vmim = (name: string, created: string, phase?: string): VirtualMachineInstanceMigration => ({
  metadata: { name, namespace: 'ns', uid: `uid-${name}`, creationTimestamp: created },
  spec: { vmiName: 'vm' },
  ...(phase ? { status: { phase: phase as never } } : {}),
});
const running = vmi({ phase: 'Running' });

t.test('migration admission refuses as KubeVirt does, in its words', async (t) => {
  const m1 = vmim('m1', '2026-01-01T00:00:00Z', 'Scheduling');
  const cases: Array<[string, string | undefined, RegExp | undefined]> = [
    ['missing VMI', migrationRefusal('ns', 'vm', undefined, []), /the VMI "ns\/vm" does not exist/],
    ['final VMI', migrationRefusal('ns', 'vm', vmi({ phase: 'Succeeded' }), []), /finalized state/],
    [
      'not live-migratable',
      migrationRefusal(
        'ns',
        'vm',
        vmi({
          phase: 'Running',
          conditions: [{ type: 'LiveMigratable', status: 'False', reason: 'DisksNotLiveMigratable', message: 'hostDisk d1' }],
        }),
        [],
      ),
      /Reason: DisksNotLiveMigratable, Message: hostDisk d1/,
    ],
    ['another unfinished migration', migrationRefusal('ns', 'vm', running, [m1]), /in-flight migration detected.*uid-m1/],
    ['a finished one does not count', migrationRefusal('ns', 'vm', running, [vmim('m0', '2026-01-01T00:00:00Z', 'Failed')]), undefined],
    [
      'a migration of another VMI does not count',
      migrationRefusal('ns', 'vm', running, [{ ...m1, spec: { vmiName: 'other' } }]),
      undefined,
    ],
    ['the VMIM itself does not count', migrationRefusal('ns', 'vm', running, [m1], m1), undefined],
    [
      'of two new ones, the older goes ahead',
      migrationRefusal('ns', 'vm', running, [vmim('b', '2026-01-01T00:00:01Z')], vmim('a', '2026-01-01T00:00:00Z')),
      undefined,
    ],
    [
      'and the younger is refused',
      migrationRefusal('ns', 'vm', running, [vmim('a', '2026-01-01T00:00:00Z')], vmim('b', '2026-01-01T00:00:01Z')),
      /in-flight/,
    ],
    ['LiveMigratable True or unset is fine', migrationRefusal('ns', 'vm', running, []), undefined],
  ];
  for (const [name, got, want] of cases) {
    if (want) t.match(got, want, name);
    else t.equal(got, undefined, name);
  }
});
