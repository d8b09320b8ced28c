// The host side of a VM's run, made before libvirt sees its domain: the
// cgroup's limits, QEMU's private socket directory and the disks. Shared by a
// boot and an incoming migration (VmManager.start, VmManager.prepareIncoming).
import { chown, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { DomainRuntime } from '../vmm/domain/runtime.js';
import type { VmSpec } from '../vmm/spec.js';
import { cgroupLimits } from './limits.js';
import { VNC_SOCKET_NAME } from './qemu-sockets.js';
import type { VmManagerOptions } from './vm-manager-deps.js';

export type HostSideDeps = Pick<VmManagerOptions, 'vmm' | 'cgroup' | 'host' | 'socketDir' | 'qemuUser' | 'emulatorPath'>;

/** QEMU's serial console socket, in the VM's socket directory. */
export const consoleSocketOf = (socketDir: string): string => path.join(socketDir, 'console.sock');

/** The spec's host files resolved and made, and what the domain XML needs of them. */
export async function prepareHostSide(o: HostSideDeps, spec: VmSpec): Promise<{ onHost: VmSpec; runtime: DomainRuntime }> {
  // Checked before anything reads a host file; the domain gets the resolved paths, while the launcher keeps the spec
  // as the agent sent it, so the agent's next identical SyncVm compares equal.
  const onHost = await o.vmm.resolveHostFiles(spec);
  await o.cgroup.setLimits(cgroupLimits(spec, o.host.accelerator, 'starting'));
  await mkdir(o.socketDir, { recursive: true, mode: 0o700 });
  await chown(o.socketDir, o.qemuUser.uid, o.qemuUser.gid);
  const consoleSocketPath = consoleSocketOf(o.socketDir);
  const vncSocketPath = path.join(o.socketDir, VNC_SOCKET_NAME);
  for (const socket of [consoleSocketPath, vncSocketPath]) await rm(socket, { force: true });
  const runtime: DomainRuntime = {
    emulatorPath: o.emulatorPath,
    consoleSocketPath,
    ...(spec.guestAgent ? { guestAgentSocketPath: path.join(o.socketDir, 'agent.sock') } : {}),
    ...(spec.vnc ? { vncSocketPath } : {}),
    disks: await o.vmm.prepareDisks(onHost),
  };
  return { onHost, runtime };
}
