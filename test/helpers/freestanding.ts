// Builds a freestanding x86_64 Linux program (no libc: its syscalls and
// _start from freestanding.h) with the host's gcc: a few KiB, static, so it runs on the node and
// reaches the test guest as one `kubectl exec` argument.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

export async function compileFreestanding(source: string, out: string): Promise<void> {
  const flags = [
    '-Os',
    '-static',
    '-nostdlib',
    '-fno-pie',
    '-no-pie',
    '-ffreestanding',
    '-fno-stack-protector',
    '-fno-asynchronous-unwind-tables',
  ];
  // No memset calls for the zeroing loops (there is no libc to provide one); no page-aligned padding.
  flags.push('-fno-tree-loop-distribute-patterns', '-Wl,--build-id=none', '-Wl,-z,noseparate-code', '-s');
  await execFileP('gcc', [...flags, '-o', out, source]);
}
