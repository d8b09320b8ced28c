// The machine a run happened on, for BENCHMARKS.md: figures from a 2-core
// TCG box and from a KVM server are not comparable.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { promisify } from 'node:util';
import { DEFAULTS } from '../../launcher/args.js';
import { probeHostCaps } from '../../vmm/probe/virtualization.js';

const execFileP = promisify(execFile);

export interface MachineFacts {
  dateUtc: string;
  cpuModel: string;
  cores: number;
  memoryMiB: number;
  kernel: string;
  os: string;
  accelerator: string;
  acceleratorReason: string;
  libvirtd: string;
  qemu: string;
  node: string;
}

async function firstLine(cmd: string, args: string[]): Promise<string> {
  try {
    const { stdout, stderr } = await execFileP(cmd, args);
    return (stdout || stderr).split('\n')[0]!.trim();
  } catch (err) {
    return `unknown (${(err as Error).message.split('\n')[0]})`;
  }
}

export async function machineFacts(): Promise<MachineFacts> {
  const host = await probeHostCaps(true);
  const osRelease = await readFile('/etc/os-release', 'utf8').catch(() => '');
  return {
    dateUtc: new Date().toISOString(),
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    memoryMiB: Math.round(os.totalmem() / 1024 / 1024),
    kernel: os.release(),
    os: /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(osRelease)?.[1] ?? 'unknown',
    accelerator: host.accelerator,
    acceleratorReason: host.reason,
    libvirtd: await firstLine(DEFAULTS.libvirtd, ['--version']),
    qemu: await firstLine(DEFAULTS.emulator, ['--version']),
    node: process.version,
  };
}
