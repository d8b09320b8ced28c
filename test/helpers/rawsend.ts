// Builds rawsend (rawsend.c) with the host's gcc, once per test process.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { packageRoot } from '../../provider/package-root.js';
import { compileFreestanding } from './freestanding.js';

/** Compiles rawsend into a directory removed in `t`'s teardown; resolves with the binary's path. */
export async function buildRawsend(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-rawsend-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const out = join(dir, 'rawsend');
  await compileFreestanding(join(packageRoot(), 'test', 'helpers', 'rawsend.c'), out);
  return out;
}
