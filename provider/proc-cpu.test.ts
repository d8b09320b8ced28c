import { spawnSync } from 'node:child_process';
import t from 'tap';
import { parseProcStat, processCpu, treeCpuMs } from './proc-cpu.js';

t.test('a stat line gives the command name and CPU in ms, odd names included', async (t) => {
  const rest = 'S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15';
  // utime=11 stime=12 cutime=13 cstime=14 ticks
  t.same(parseProcStat(`42 (qemu-system-x86) ${rest}`), { comm: 'qemu-system-x86', selfMs: 230, reapedChildrenMs: 270 });
  t.same(parseProcStat(`42 (a) (b) ${rest}`), { comm: 'a) (b', selfMs: 230, reapedChildrenMs: 270 }, 'the last ") " ends the name');
  t.equal(parseProcStat('garbage'), undefined);
});

t.test('this process and its tree, the reaped children in it, a skipped subtree out of it', async (t) => {
  // Burn some CPU in a child that this process reaps.
  spawnSync(process.execPath, ['-e', 'while (process.cpuUsage().user + process.cpuUsage().system < 60e3);']);
  const self = await processCpu('self');
  t.ok(self && self.reapedChildrenMs >= 50, `the child's CPU is ours once reaped: ${JSON.stringify(self)}`);
  const all = await treeCpuMs(process.pid, () => false);
  t.ok(all >= self!.selfMs + self!.reapedChildrenMs, 'the tree counts at least this process');
  t.equal(await treeCpuMs(process.pid, () => true), 0, 'a skipped root skips everything');
  t.equal(await processCpu(2 ** 22 + 1), undefined, 'a process that does not exist');
});
