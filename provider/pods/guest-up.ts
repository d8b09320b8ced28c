// Whether a VM's guest OS is up in its current run: its Ready when it has no
// readiness probe (docs/pods.md, "Ready"). Stronger than KubeVirt's Ready
// (the domain runs and its launcher is ready), and true for every firmware
// and for guests that never write to their serial console. The first that
// holds, in this run:
//   - the guest agent connected;
//   - the guest took its address by DHCP from the node (dhcp-acks.ts);
//   - the serial console carried output, unless the firmware writes there
//     itself (OVMF; SeaBIOS with useSerial): SeaBIOS is silent on serial by
//     default, so on BIOS the first byte is the boot loader's or kernel's;
//   - the VM arrived by live migration: it booted elsewhere, its console and
//     DHCP here may stay quiet.
// A UEFI guest with neither agent nor DHCP is never up without a probe. Pure.
import type { VmState } from '../../launcher/agent-api.js';

export type GuestFacts = Pick<
  VmState,
  'startedAtUnixMs' | 'consoleOutputAtUnixMs' | 'firmwareOnConsole' | 'guestAgentConnected' | 'guestAgentConnectedAtUnixMs' | 'migration'
>;

/**
 * `dhcpAckedAtUnixMs`: when the node's DHCP last served the VM's guest; an answer before the run started
 * was the previous run's guest. The launcher's facts are its run's own (one launcher per run).
 */
export function guestUp(run: GuestFacts, dhcpAckedAtUnixMs: number | undefined): boolean {
  if (run.guestAgentConnected || run.guestAgentConnectedAtUnixMs > 0) return true;
  if (dhcpAckedAtUnixMs !== undefined && run.startedAtUnixMs > 0 && dhcpAckedAtUnixMs >= run.startedAtUnixMs) return true;
  if (run.consoleOutputAtUnixMs > 0 && !run.firmwareOnConsole) return true;
  return run.migration?.phase === 'Resumed';
}
