import t from 'tap';
import { disksWithDefaults } from './defaults.js';
import type { VirtualMachineInstanceSpec } from './types.js';

const spec = (devices: VirtualMachineInstanceSpec['domain']['devices'], volumes: VirtualMachineInstanceSpec['volumes']) =>
  ({ domain: { devices }, volumes }) as VirtualMachineInstanceSpec;

t.test("a volume no disk names gets a SATA disk of its name, as KubeVirt's amd64 defaulting gives it", async (t) => {
  // KubeVirt's vm-cirros-sata example: `devices: {}` and two volumes.
  t.same(
    disksWithDefaults(
      spec({}, [
        { name: 'containerdisk', containerDisk: { image: 'registry:5000/kubevirt/cirros-container-disk-demo:devel' } },
        { name: 'cloudinitdisk', cloudInitNoCloud: { userData: '#!/bin/sh\n' } },
      ]),
    ),
    [
      { name: 'containerdisk', disk: { bus: 'sata' } },
      { name: 'cloudinitdisk', disk: { bus: 'sata' } },
    ],
    'one disk per volume, in volume order',
  );
  t.same(
    disksWithDefaults(
      spec({ disks: [{ name: 'root', cdrom: {} }], filesystems: [{ name: 'shared' }] }, [
        { name: 'root', containerDisk: { image: 'img' } },
        { name: 'shared', persistentVolumeClaim: { claimName: 'shared' } },
        { name: 'scratch', emptyDisk: { capacity: '1Gi' } },
      ]),
    ),
    [
      { name: 'root', cdrom: {} },
      { name: 'scratch', disk: { bus: 'sata' } },
    ],
    'disks given are kept as written; a volume a filesystem names gets none (KubeVirt skips it too)',
  );
  t.equal(
    disksWithDefaults(spec({ disks: [{ name: 'root' }] }, [{ name: 'root', containerDisk: { image: 'img' } }])),
    undefined,
    'nothing to write when every volume has a disk',
  );
  t.equal(disksWithDefaults(spec(undefined, undefined)), undefined, 'nor without volumes');
});
