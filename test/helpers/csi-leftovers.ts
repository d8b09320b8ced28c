// Test support: what a CSI driver could leave on the host, found under a directory.
import { execFile } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import { parseLoopDevices, parseMountPoints } from '../../provider/csi/block-devices.js';

const execFileP = promisify(execFile);

export async function loopDevicesUnder(dir: string): Promise<string[]> {
  const { stdout } = await execFileP('losetup', ['--json', '--list']);
  return parseLoopDevices(stdout)
    .filter((d) => d.backingFile.startsWith(`${dir}/`))
    .map((d) => `${d.device} ${d.backingFile}`);
}

export async function mountsUnder(dir: string): Promise<string[]> {
  return [...parseMountPoints(await readFile('/proc/self/mountinfo', 'utf8'))].filter((m) => m.startsWith(`${dir}/`));
}

/** Removes a test's scratch directory, and first what a test that failed half-way may have left in it on this shared host: mounts (deepest first), then loop devices. */
export async function removeScratch(root: string): Promise<void> {
  for (const m of (await mountsUnder(root)).sort().reverse()) await execFileP('umount', ['--lazy', m]);
  for (const l of await loopDevicesUnder(root)) await execFileP('losetup', ['--detach', l.split(' ')[0]!]);
  await rm(root, { recursive: true, force: true });
}
