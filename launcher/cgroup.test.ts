import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { Cgroup, cgroupDir, detectLayout } from './cgroup.js';

// 2048 shares: a 2-core request.
const limits = { memoryBytes: 512 * 1024 * 1024, cpuMillicores: 250, cpuWeight: { shares: 2048 }, pidsMax: 1024 };

t.test('v2 when the unified hierarchy has memory, cpu and pids', async (t) => {
  const root = t.testdir({ 'cgroup.controllers': 'cpuset cpu io memory pids\n', 'cgroup.subtree_control': '' });
  t.same(await detectLayout(root), { version: 'v2', mount: root });
  const cg = await Cgroup.create({ uid: 'u1', parent: 'vkvm', root });
  await cg.setLimits(limits);
  const dir = path.join(root, 'vkvm', 'u1');
  t.same(
    ['memory.max', 'cpu.max', 'cpu.weight', 'pids.max'].map((f) => readFileSync(path.join(dir, f), 'utf8')),
    [String(512 * 1024 * 1024), '25000 100000', '79', '1024'],
    'limits land in the v2 files, the request as the weight the kubelet would set',
  );
  t.equal(
    readFileSync(path.join(root, 'vkvm', 'cgroup.subtree_control'), 'utf8'),
    '+memory +cpu +pids',
    'controllers enabled for the leaf',
  );
  t.equal(cg.describe(), 'v2:/vkvm/u1');

  await cg.setLimits({ ...limits, cpuWeight: 'default' });
  t.equal(readFileSync(path.join(dir, 'cpu.weight'), 'utf8'), '100', "the default weight is the kernel's, not 1024 shares converted");
  t.equal(readFileSync(path.join(dir, 'cpu.max'), 'utf8'), '25000 100000', 'the CPU limit applies at the default weight too');
  await cg.setCpuWeight({ shares: 10 });
  t.equal(readFileSync(path.join(dir, 'cpu.weight'), 'utf8'), '1', 'setCpuWeight: a 10m request');
});

t.test('v1 when the unified hierarchy is empty (hybrid mount)', async (t) => {
  const root = t.testdir({
    unified: { 'cgroup.controllers': '' },
    memory: { 'cgroup.procs': '' },
    cpu: { 'cgroup.procs': '' },
    pids: { 'cgroup.procs': '' },
  });
  t.match(await detectLayout(root), { version: 'v1' });
  const cg = await Cgroup.create({ uid: 'u1', parent: 'vkvm', root });
  await cg.setLimits({ ...limits, cpuMillicores: undefined });
  const read = (c: string, f: string) => readFileSync(path.join(root, c, 'vkvm', 'u1', f), 'utf8');
  t.same(
    [read('memory', 'memory.limit_in_bytes'), read('cpu', 'cpu.cfs_quota_us'), read('cpu', 'cpu.shares'), read('pids', 'pids.max')],
    [String(512 * 1024 * 1024), '-1', '2048', '1024'],
    'limits land in the v1 files (the request as shares); no CPU limit means no quota',
  );
  t.equal(cg.memoryLimitBytes, 512 * 1024 * 1024);

  await cg.setLimits({ ...limits, cpuWeight: 'default' });
  t.same([read('cpu', 'cpu.shares'), read('cpu', 'cpu.cfs_quota_us')], ['1024', '25000'], 'the default: 1024 shares, the quota kept');
  await cg.setCpuWeight({ shares: 10 });
  t.equal(read('cpu', 'cpu.shares'), '10', 'setCpuWeight: a 10m request');
});

t.test('a cgroup that still holds processes is not adopted', async (t) => {
  const root = t.testdir({ memory: { 'cgroup.procs': '' }, cpu: { 'cgroup.procs': '' }, pids: { 'cgroup.procs': '' } });
  mkdirSync(path.join(root, 'pids', 'vkvm', 'u1'), { recursive: true });
  writeFileSync(path.join(root, 'pids', 'vkvm', 'u1', 'cgroup.procs'), '4242\n');
  await t.rejects(Cgroup.create({ uid: 'u1', parent: 'vkvm', root }), /already holds processes 4242/);
});

t.test('v1 joins a separately mounted cpuacct hierarchy, so CPU time is accounted per VM', async (t) => {
  const root = t.testdir({
    memory: { 'cgroup.procs': '' },
    cpu: { 'cgroup.procs': '' },
    cpuacct: { 'cgroup.procs': '' },
    pids: { 'cgroup.procs': '' },
  });
  const layout = await detectLayout(root);
  t.match(layout, { version: 'v1', mounts: { cpuacct: path.join(root, 'cpuacct') } });
  const cg = await Cgroup.create({ uid: 'u1', parent: 'vkvm', root });
  await cg.enter(4242);
  t.equal(readFileSync(path.join(root, 'cpuacct', 'vkvm', 'u1', 'cgroup.procs'), 'utf8'), '4242', 'the process joins cpuacct too');
  t.equal(cgroupDir(layout, 'cpuacct', 'vkvm/u1'), path.join(root, 'cpuacct', 'vkvm', 'u1'));
});
