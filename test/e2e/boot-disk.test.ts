// A KubeVirt user's containerDisk is a bootable disk with cloud-init inside
// (quay.io/containerdisks ship qcow2 cloud images). Here the test guest is
// one: an MBR disk with syslinux and systemd-boot (vmm/guest/boot-disk.ts),
// packaged as containerDisks are (/disk/disk.img, owned by 107) and pushed to
// a real registry (Debian's docker-registry). A tenant (edit in one
// namespace) runs it with kubectl as a VMI with BIOS firmware and as a VM with
// UEFI firmware, each with cloudInitNoCloud user-data: the console, read with
// the tenant's `kubectl logs`, shows the disk's own boot loader starting the
// kernel, and the user-data's effect; the UEFI VM turns Ready only once its
// guest is up, not on its firmware's console output.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { stringify } from 'yaml';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachineInstance, VirtualMachineInstanceSpec } from '../../provider/kubevirt/types.js';
import { argvOf } from '../helpers/processes.js';
import { CLOUD_INIT_FINISHED } from '../../vmm/guest/nocloud.js';
import { ensureTestGuestDisk } from '../../vmm/guest/boot-disk.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { buildImage, pushImage, tarLayer } from '../helpers/oci.js';
import {
  condition,
  createTenant,
  tenantKubectl,
  poll,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  testLog,
  testNamespace,
  virtualMachineInstances,
  virtualMachines,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-disk';
const NS = 'e2e-boot-disk';
const BOOT_DEADLINE_MS = 180_000;

/** A VMI spec booting `image` as its only disk, with `userData` on a NoCloud seed on `seedDisk`. */
function bootDiskSpec(
  image: string,
  userData: string,
  seedDisk: object,
  opts: { firmware?: object; memory?: string } = {},
): VirtualMachineInstanceSpec {
  return {
    domain: {
      ...(opts.firmware ? { firmware: opts.firmware } : {}),
      resources: { requests: { memory: opts.memory ?? '128Mi' } },
      devices: {
        disks: [
          { name: 'containerdisk', disk: { bus: 'virtio' } },
          { name: 'cloudinitdisk', ...seedDisk },
        ],
      },
    },
    volumes: [
      { name: 'containerdisk', containerDisk: { image } },
      { name: 'cloudinitdisk', cloudInitNoCloud: { userData } },
    ],
  } as VirtualMachineInstanceSpec;
}

t.test('containerDisks boot through their firmware and boot loader, and their cloud-init user-data runs', async (t) => {
  const registry = await startDockerRegistry(t, { dir: join(t.testdir(), 'registry') });
  const disk = await ensureTestGuestDisk({ log: (msg) => testLog.info(msg) });
  const image = `${registry.host}/containerdisks/vkvm-test-guest:v1`;
  await pushImage(registry.base, 'containerdisks/vkvm-test-guest', 'v1', [
    buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: readFileSync(disk.path) }]) }]),
  ]);

  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  // The registry is on this node's loopback: the operator lists it, as registries there are refused otherwise.
  await startAgent(t, cluster, { nodeName: NODE, extraArgs: [`--local-registry=${registry.host}`] });
  await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const kubectl = await tenantKubectl(t, cluster, tenant);

  const apply = async (manifest: object) => {
    const res = await kubectl(['apply', '-n', NS, '-f', '-'], { input: stringify(manifest) });
    t.equal(res.code, 0, `kubectl apply as the tenant: ${res.stderr}`);
  };
  /** The launcher pod's console once it holds `text`, read with the tenant's kubectl logs. */
  const consoleWith = async (vmiName: string, text: string): Promise<string> => {
    const [pod] = (await tenant.core.listNamespacedPod({ namespace: NS, labelSelector: `vm.kubevirt.io/name=${vmiName}` })).items;
    const podName = pod?.metadata?.name ?? '';
    const logs = await poll(
      `"${text}" in kubectl logs ${podName}`,
      () => kubectl(['logs', '-n', NS, podName]),
      (r) => r.code === 0 && r.stdout.includes(text),
      { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 1000 },
    );
    return logs.stdout;
  };
  /** When the console line holding `text` was written (its CRI timestamp, through the tenant's kubectl logs --timestamps). */
  const consoleLineAt = async (vmiName: string, text: string): Promise<number> => {
    const [pod] = (await tenant.core.listNamespacedPod({ namespace: NS, labelSelector: `vm.kubevirt.io/name=${vmiName}` })).items;
    const logs = await kubectl(['logs', '--timestamps', '-n', NS, pod?.metadata?.name ?? '']);
    const line = logs.stdout.split('\n').find((l) => l.includes(text)) ?? '';
    return Date.parse(line.split(' ')[0] ?? '');
  };
  /** The QEMU command line of the VMI's domain: its uuid is the firmware UUID (a VM's VMI has one), else the VMI's uid. */
  const qemuArgv = (vmi: VirtualMachineInstance): string[] => {
    const [pid] = qemuPidsOf(vmi.spec.domain.firmware?.uuid ?? vmi.metadata.uid!);
    return pid === undefined ? [] : argvOf(pid);
  };

  await t.test(
    'a VMI with BIOS on serial: SeaBIOS runs syslinux from the disk; a user-data script runs, on the meta-data hostname',
    async (t) => {
      const userData = '#!/bin/sh\necho "vkvm-e2e: user-data script ran on $(hostname)"\n';
      await apply({
        apiVersion: 'kubevirt.io/v1',
        kind: 'VirtualMachineInstance',
        metadata: { name: 'bios-vmi' },
        // useSerial: SeaBIOS's own output on the console, which has no screen.
        spec: bootDiskSpec(image, userData, { disk: { bus: 'virtio' } }, { firmware: { bootloader: { bios: { useSerial: true } } } }),
      });
      const vmi = await waitFor(virtualMachineInstances(tenant, NS, { name: 'bios-vmi' }), (v) => v.status?.phase === 'Running', {
        what: 'Running',
        deadlineMs: BOOT_DEADLINE_MS,
      });
      const console = await consoleWith('bios-vmi', CLOUD_INIT_FINISHED);
      const at = (s: string) => console.indexOf(s);
      t.equal(condition(vmi, 'UnsupportedFields'), undefined, 'every field is realized, bios.useSerial too');
      t.ok(at('SeaBIOS (version') >= 0 && at('SeaBIOS (version') < at('SYSLINUX 6.04'), 'SeaBIOS on the console (bios.useSerial), then');
      t.ok(
        at('SYSLINUX 6.04') >= 0 && at('SYSLINUX 6.04') < at(disk.bootMarker),
        "syslinux, from the disk's boot sector, before the kernel's userspace",
      );
      t.ok(
        at(disk.bootMarker) < at('vkvm-e2e: user-data script ran on bios-vmi'),
        'the user-data script ran after boot, as the meta-data hostname',
      );
      t.match(console, `${CLOUD_INIT_FINISHED} `, "cloud-init's final message");
      t.match(console, /Datasource DataSourceNoCloud \[seed=\/dev\/vdb\]/, 'the seed was read from the second virtio disk');
      const argv = qemuArgv(vmi);
      t.same(
        { kernel: argv.includes('-kernel'), pflash: argv.some((a) => a.includes('pflash')) },
        { kernel: false, pflash: false },
        'QEMU boots no kernel of its own and has no UEFI flash: the disk boots through SeaBIOS',
      );
    },
  );

  await t.test(
    'a VM with UEFI (efi, secureBoot false): OVMF runs systemd-boot from the disk; #cloud-config sets the hostname and runs runcmd',
    async (t) => {
      const userData = '#cloud-config\nhostname: uefi-guest\nruncmd:\n  - echo "vkvm-e2e: runcmd ran on $(hostname)"\n';
      await apply({
        apiVersion: 'kubevirt.io/v1',
        kind: 'VirtualMachine',
        metadata: { name: 'uefi-vm' },
        spec: {
          runStrategy: 'Always',
          template: {
            // OVMF, systemd-boot and the Debian kernel hang in 128 MiB (measured under TCG); 256 MiB boot.
            spec: bootDiskSpec(
              image,
              userData,
              { cdrom: { bus: 'sata' } },
              { firmware: { bootloader: { efi: { secureBoot: false } } }, memory: '256Mi' },
            ),
          },
        },
      });
      await waitFor(
        virtualMachines(tenant, NS, { name: 'uefi-vm' }),
        (vm) => vm.status?.printableStatus === 'Running' && vm.status.ready === true,
        { what: 'Running and ready', deadlineMs: BOOT_DEADLINE_MS },
      );
      const vmi = await waitFor(virtualMachineInstances(tenant, NS, { name: 'uefi-vm' }), (v) => condition(v, 'Ready') === 'True');
      const console = await consoleWith('uefi-vm', CLOUD_INIT_FINISHED);
      const at = (s: string) => console.indexOf(s);
      // OVMF writes to the serial console from its first moments; the guest's /init prints the boot marker before it
      // starts the DHCP client and the guest agent, the signals a UEFI guest's Ready waits for (provider/pods/guest-up.ts).
      const readyAt = Date.parse(vmi.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime ?? '');
      const guestSpokeAt = await consoleLineAt('uefi-vm', disk.bootMarker);
      t.ok(
        readyAt >= Math.floor(guestSpokeAt / 1000) * 1000,
        `the VMI turned Ready (${new Date(readyAt).toJSON()}) once its guest was up, not on OVMF's output: ` +
          `not before its userspace's first line (${new Date(guestSpokeAt).toJSON()}; Ready is in whole seconds)`,
      );
      t.ok(
        at('BdsDxe: starting') >= 0 && at('BdsDxe: starting') < at(disk.bootMarker),
        "OVMF's boot manager started the disk's loader before the kernel's userspace",
      );
      t.match(console, 'vkvm-e2e: runcmd ran on uefi-guest', 'runcmd ran after #cloud-config set the hostname');
      t.match(console, /Datasource DataSourceNoCloud \[seed=\/dev\/sr0\]/, 'the seed was read from the SATA CD-ROM');
      const argv = qemuArgv(vmi);
      t.same(
        { kernel: argv.includes('-kernel'), pflash: argv.some((a) => a.includes('pflash')) },
        { kernel: false, pflash: true },
        'QEMU boots no kernel of its own, from UEFI flash',
      );
    },
  );
});
