import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { makeStateDir, unsearchableDir, vmsDirCheck, vmsDirTooLong } from './state-dir.js';

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

t.test('a state dir vkvm up creates passes the check once the control plane made its 0700 directory inside', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'vkvm-state-dir-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  await chmod(root, 0o711);
  const stateDir = join(root, 'var', 'lib', 'vkvm');
  await makeStateDir(stateDir);
  // As deploy/cluster/cluster.ts makes the control plane's directory, after.
  await mkdir(join(stateDir, 'cluster'), { recursive: true, mode: 0o700 });
  t.same(
    { mode: ((await stat(stateDir)).mode & 0o777).toString(8), unsearchable: await unsearchableDir(join(stateDir, 'vms')) },
    { mode: '711', unsearchable: undefined },
    'created 0711: QEMU passes, nobody lists',
  );

  const operators = join(root, 'operators');
  await mkdir(operators, { mode: 0o700 });
  await makeStateDir(operators);
  t.equal((await stat(operators)).mode & 0o777, 0o700, "an existing directory is the operator's: left as it is, for the check to judge");
});

t.test('a state dir too long for the VMs sockets below it is refused, naming the flag', async (t) => {
  t.same(
    [vmsDirTooLong('/var/lib/vkvm/vms'), vmsDirTooLong(`/tmp/${'x'.repeat(37)}/vms`)],
    [
      undefined,
      `/tmp/${'x'.repeat(37)}/vms is too long: a VM's sockets below it (/00000000-0000-0000-0000-000000000000/libvirt/run/libvirt-sock-ro) would pass the 107 bytes of a unix socket path; use a shorter --state-dir`,
    ],
  );
});
