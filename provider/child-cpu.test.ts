import { spawnSync } from 'node:child_process';
import t from 'tap';
import { ChildCpuMeter } from './child-cpu.js';

t.test("the children's CPU is split evenly among the operations under way when it grew", async (t) => {
  let total = 1000;
  const meter = new ChildCpuMeter(() => total);
  total += 50; // before any operation: nobody's
  const endA = meter.begin();
  total += 30; // A alone
  const endB = meter.begin();
  total += 40; // A and B
  const a = endA();
  total += 10; // B alone
  const b = endB();
  total += 99; // after both: nobody's
  const endC = meter.begin();
  const c = endC();
  t.same({ a, b, c }, { a: 50, b: 30, c: 0 });
});

t.test('by default it reads this process: a child reaped during an operation is charged to it', async (t) => {
  const meter = new ChildCpuMeter();
  const end = meter.begin();
  // Until it has used 60 ms of CPU, however busy the host is.
  spawnSync(process.execPath, ['-e', 'while (process.cpuUsage().user + process.cpuUsage().system < 60e3);']);
  const ms = end();
  t.ok(ms >= 50, `the child's CPU went to the operation: ${ms} ms`);
});
