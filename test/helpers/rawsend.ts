// Builds rawsend (rawsend.c) with the host's gcc, once per test process.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Test } from 'tap';
import { packageRoot } from '../../provider/package-root.js';

const execFileP = promisify(execFile);

/** Compiles rawsend into a directory removed in `t`'s teardown; resolves with the binary's path. */
export async function buildRawsend(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-rawsend-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const out = join(dir, 'rawsend');
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
  await execFileP('gcc', [...flags, '-o', out, join(packageRoot(), 'test', 'helpers', 'rawsend.c')]);
  return out;
}
