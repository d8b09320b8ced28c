import t from 'tap';
import { resolveAgentConfig } from '../config.js';
import type { HostFacts } from './host-facts.js';
import type { PreflightCheck } from '../preflight/checks.js';
import { deriveConditions, deriveLabels, deriveNodeStatus, statusChanged } from './status.js';

const GiB = 1024 ** 3;
const facts = (over: Partial<HostFacts> = {}): HostFacts => ({
  hostname: 'h1',
  internalIP: '192.0.2.2',
  cpuCount: 4,
  memoryTotalBytes: 16 * GiB,
  memoryAvailableBytes: 8 * GiB,
  diskTotalBytes: 100 * GiB,
  diskAvailableBytes: 50 * GiB,
  pidMax: 4_000_000,
  pidsInUse: 500,
  kernelVersion: '6.1.0',
  osImage: 'Debian GNU/Linux 12 (bookworm)',
  architecture: 'amd64',
  machineID: 'm',
  bootID: 'b',
  virtualization: { accelerator: 'tcg', reason: 'software emulation: x', facts: { kvmDeviceUsable: true, hardwareVirtFlag: null } },
  preflight: [
    { condition: 'VirtualizationPackages', severity: 'hard', ok: true, reason: 'PackagesInstalled', message: '' },
    { condition: 'KVMUsable', severity: 'soft', ok: false, reason: 'SoftwareEmulation', message: '' },
    { condition: 'IPForwarding', severity: 'soft', ok: false, reason: 'Disabled', message: '' },
  ],
  images: [],
  ...over,
});
const config = resolveAgentConfig({ kubeconfig: '/k', 'node-name': 'n1', 'memory-reserved-mib': '1024' });
const now = new Date('2026-11-21T00:00:00Z');
const byType = (conds: { type: string; status: string; reason?: string }[]) =>
  Object.fromEntries(conds.map((c) => [c.type, `${c.status}/${c.reason}`]));

t.test('a healthy TCG host is Ready, reports software emulation and no KVM device', async (t) => {
  const s = deriveNodeStatus(config, facts(), [], now);
  t.same(
    byType(s.conditions!),
    {
      MemoryPressure: 'False/KubeletHasSufficientMemory',
      DiskPressure: 'False/KubeletHasNoDiskPressure',
      PIDPressure: 'False/KubeletHasSufficientPID',
      NetworkUnavailable: 'False/VkvmNetworkReady',
      HardwareVirtualization: 'False/SoftwareEmulation',
      Ready: 'True/KubeletReady',
      VirtualizationPackages: 'True/PackagesInstalled',
      IPForwarding: 'False/Disabled',
    },
    'preflight checks are conditions (KVM only as HardwareVirtualization); a failed soft one keeps the node Ready',
  );
  t.same(s.capacity, { cpu: '4', memory: `${16 * 1024 * 1024}Ki`, 'ephemeral-storage': `${100 * 1024 * 1024}Ki`, pods: '110' });
  t.equal(s.allocatable!.memory, `${15 * 1024 * 1024}Ki`, 'reserved memory is kept back from allocatable');
  t.same(s.addresses, [
    { type: 'InternalIP', address: '192.0.2.2' },
    { type: 'Hostname', address: 'h1' },
  ]);
  t.equal(s.daemonEndpoints!.kubeletEndpoint!.Port, 10250);
  t.match(deriveLabels(config, facts()), { type: 'virtual-kubelet', 'vkvm.io/virtualization': 'tcg', 'kubevirt.io/schedulable': 'true' });
});

t.test('KVM hosts advertise the KVM device resource', async (t) => {
  const s = deriveNodeStatus(
    config,
    facts({ virtualization: { accelerator: 'kvm', reason: 'r', facts: { kvmDeviceUsable: true, hardwareVirtFlag: 'vmx' } } }),
    [],
    now,
  );
  t.equal(s.capacity!['devices.kubevirt.io/kvm'], '1000');
  t.match(byType(s.conditions!), { HardwareVirtualization: 'True/KVM' });
});

t.test('pressure conditions follow host facts; no address means NotReady', async (t) => {
  const c = deriveConditions(facts({ memoryAvailableBytes: 10, diskAvailableBytes: 1, pidsInUse: 3_900_000, internalIP: null }), [], now);
  t.match(byType(c), {
    MemoryPressure: 'True/KubeletHasInsufficientMemory',
    DiskPressure: 'True/KubeletHasDiskPressure',
    PIDPressure: 'True/KubeletHasInsufficientPID',
    NetworkUnavailable: 'True/NoInternalIP',
    Ready: 'False/KubeletNotReady',
  });
});

t.test('a failed hard preflight check makes the node NotReady and names the check', async (t) => {
  const missing: PreflightCheck = {
    condition: 'VirtualizationPackages',
    severity: 'hard',
    ok: false,
    reason: 'PackagesMissing',
    message: 'not found in PATH: qemu-img',
  };
  const c = deriveConditions(facts({ preflight: [missing] }), [], now);
  t.match(byType(c), { VirtualizationPackages: 'False/PackagesMissing', Ready: 'False/HostRequirementsUnmet' });
  t.match(
    c.find((x) => x.type === 'VirtualizationPackages'),
    { message: 'not found in PATH: qemu-img' },
  );
});

t.test('lastTransitionTime is kept while a condition holds and moves when it flips', async (t) => {
  const earlier = new Date('2026-01-01T00:00:00Z');
  const prev = [
    { type: 'Ready', status: 'True', lastTransitionTime: earlier },
    { type: 'MemoryPressure', status: 'True', lastTransitionTime: earlier },
  ];
  const c = deriveConditions(facts(), prev, now);
  t.same(c.find((x) => x.type === 'Ready')!.lastTransitionTime, earlier);
  t.same(c.find((x) => x.type === 'MemoryPressure')!.lastTransitionTime, now);
});

t.test("the image store's images are node.status.images, for the scheduler's image locality", async (t) => {
  const images = [{ names: ['quay.io/a/disk:v1', 'quay.io/a/disk@sha256:aa'], sizeBytes: 100 }];
  t.same(deriveNodeStatus(config, facts({ images }), [], now).images, images);
  t.ok(
    statusChanged(deriveNodeStatus(config, facts(), [], now), deriveNodeStatus(config, facts({ images }), [], now)),
    'a new image is a change to report',
  );
});

t.test('statusChanged ignores heartbeat times and key order only', async (t) => {
  const a = deriveNodeStatus(config, facts(), [], now);
  const b = deriveNodeStatus(config, facts(), [], new Date(now.getTime() + 60_000));
  t.notOk(statusChanged(a, { nodeInfo: b.nodeInfo, ...b }), 'same facts later: no change');
  t.ok(statusChanged(a, deriveNodeStatus(config, facts({ memoryAvailableBytes: 1 }), [], now)), 'memory pressure: change');
});
