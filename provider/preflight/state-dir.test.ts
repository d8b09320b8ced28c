import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { unsearchableDir, vmsDirCheck } from './state-dir.js';

t.test('a state dir QEMU cannot search is named, missing directories are not', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'vkvm-state-dir-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  // mkdtemp makes it 0700, as `mktemp -d` does.
  t.equal(await unsearchableDir(join(root, 'vms')), root);
  t.match(await vmsDirCheck(join(root, 'vms')), {
    condition: 'StateDirSearchable',
    severity: 'hard',
    ok: false,
    message: `${root} is not searchable by other users (mode o+x): QEMU runs unprivileged and could not open VM disks below it; use chmod o+x ${root} or another --state-dir`,
  });

  await chmod(root, 0o711);
  t.equal(await unsearchableDir(join(root, 'missing', 'vms')), undefined, 'missing ones are created searchable');
  t.match(await vmsDirCheck(join(root, 'vms')), { ok: true });
  await mkdir(join(root, 'vms'), { mode: 0o700 });
  t.equal(await unsearchableDir(join(root, 'vms')), join(root, 'vms'), 'the vms dir itself counts');
});
