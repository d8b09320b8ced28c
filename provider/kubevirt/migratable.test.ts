import t from 'tap';
import { liveMigratability } from './migratable.js';
import type { VirtualMachineInstance } from './types.js';

const vmi = (spec: Partial<VirtualMachineInstance['spec']>): VirtualMachineInstance => ({
  metadata: { name: 'vm' },
  spec: { domain: { resources: { requests: { memory: '128Mi' } } }, ...spec },
});
const containerDisk = { name: 'root', containerDisk: { image: 'quay.io/containerdisks/cirros' } };

t.test("LiveMigratable with KubeVirt's reasons; the method follows the local disks", async (t) => {
  const cases: Array<[string, ReturnType<typeof liveMigratability>, object]> = [
    [
      'containerDisk under TCG: block migration',
      liveMigratability(vmi({ volumes: [containerDisk] }), 'tcg'),
      { migratable: true, method: 'BlockMigration' },
    ],
    ['no disk: live migration', liveMigratability(vmi({}), 'tcg'), { migratable: true, method: 'LiveMigration' }],
    [
      'hostDisk',
      liveMigratability(vmi({ volumes: [{ name: 'h', hostDisk: { path: '/var/d.img', type: 'Disk' } }] }), 'tcg'),
      { migratable: false, reason: 'DisksNotLiveMigratable', message: 'cannot migrate VMI with non-shared HostDisk' },
    ],
    [
      'a PVC',
      liveMigratability(vmi({ volumes: [{ name: 'p', persistentVolumeClaim: { claimName: 'data' } }] }), 'tcg'),
      { migratable: false, reason: 'DisksNotLiveMigratable', message: /PVC data is not shared/ },
    ],
    [
      "a DataVolume (its claim's name)",
      liveMigratability(vmi({ volumes: [{ name: 'd', dataVolume: { name: 'root-dv' } }] }), 'tcg'),
      { migratable: false, reason: 'DisksNotLiveMigratable', message: /PVC root-dv is not shared/ },
    ],
    [
      'host-passthrough',
      liveMigratability(vmi({ domain: { cpu: { model: 'host-passthrough' }, memory: { guest: '1Gi' } } }), 'kvm'),
      { migratable: false, reason: 'CPUModeLiveMigratable' },
    ],
    ['no model under KVM runs host-passthrough', liveMigratability(vmi({}), 'kvm'), { migratable: false, reason: 'CPUModeLiveMigratable' }],
    [
      'a named model under KVM',
      liveMigratability(vmi({ domain: { cpu: { model: 'Haswell' }, memory: { guest: '1Gi' } } }), 'kvm'),
      { migratable: true },
    ],
  ];
  for (const [name, got, want] of cases) t.match(got, want, name);
});
