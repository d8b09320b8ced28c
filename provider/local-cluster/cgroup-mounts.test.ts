import t from 'tap';
import { parseCgroupMounts } from './cgroup-mounts.js';

t.test('the hierarchies to mount again come from mountinfo, with their controllers', async (t) => {
  const mountinfo = [
    '23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw',
    '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755',
    '32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct',
    '35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
    '40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd',
    '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate',
  ].join('\n');
  t.same(parseCgroupMounts(mountinfo), {
    rootIsTmpfs: true,
    hierarchies: [
      { path: '/sys/fs/cgroup/cpu,cpuacct', fstype: 'cgroup', options: 'cpu,cpuacct' },
      { path: '/sys/fs/cgroup/memory', fstype: 'cgroup', options: 'memory' },
      { path: '/sys/fs/cgroup/systemd', fstype: 'cgroup', options: 'xattr,name=systemd' },
      { path: '/sys/fs/cgroup/unified', fstype: 'cgroup2', options: 'nsdelegate' },
    ],
  });
  t.same(
    parseCgroupMounts('30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot'),
    { rootIsTmpfs: false, hierarchies: [{ path: '/sys/fs/cgroup', fstype: 'cgroup2', options: 'nsdelegate,memory_recursiveprot' }] },
    'cgroup v2 alone',
  );
});
