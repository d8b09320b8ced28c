// QemuExitWatch against real processes standing in for QEMU: /proc is read as in the launcher.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import t, { type Test } from 'tap';
import { QemuExitWatch } from './qemu-exit-watch.js';
import { processStartTicks } from './state.js';

/** A process that runs until the test ends or kills it. */
function fakeQemu(t: Test): { pid: number; exit: () => Promise<void> } {
  const child = spawn('sleep', ['600'], { stdio: 'ignore' });
  const exited = once(child, 'exit');
  t.teardown(() => void child.kill('SIGKILL'));
  return {
    pid: child.pid!,
    exit: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

function watch(t: Test, extra: Partial<ConstructorParameters<typeof QemuExitWatch>[0]> = {}) {
  let poweredOffCalls = 0;
  const w = new QemuExitWatch({ onPoweredOff: () => poweredOffCalls++, pollMs: 5, watchForMs: 2000, ...extra });
  t.teardown(() => w.stop());
  const until = async (done: () => boolean, ms: number) => {
    for (const end = Date.now() + ms; !done() && Date.now() < end;) await new Promise((r) => setTimeout(r, 5));
  };
  return { w, calls: () => poweredOffCalls, until };
}

t.test('Shutdown, then QEMU exits: powered off, reported once', async (t) => {
  const qemu = fakeQemu(t);
  const { w, calls, until } = watch(t);
  await w.track(qemu.pid);
  w.onLifecycle({ type: 'Shutdown', detail: 'Finished after guest request' });
  await new Promise((r) => setTimeout(r, 50));
  const beforeExit = w.poweredOff;
  await qemu.exit();
  await until(() => w.poweredOff, 1000);
  t.same({ beforeExit, after: w.poweredOff, calls: calls() }, { beforeExit: false, after: true, calls: 1 }, 'off only once QEMU is gone');
});

t.test('Shutdown, then the guest resets (ACPI reboot): QEMU stays, never powered off', async (t) => {
  const qemu = fakeQemu(t);
  const { w, calls } = watch(t, { watchForMs: 200 });
  await w.track(qemu.pid);
  w.onLifecycle({ type: 'Shutdown', detail: 'Finished after guest request' });
  await new Promise((r) => setTimeout(r, 100));
  w.onLifecycle({ type: 'Resumed', detail: 'Unpaused' });
  await new Promise((r) => setTimeout(r, 250));
  // QEMU exiting later (a crash, a destroy) is no power-off: the watch ended with the reset.
  await qemu.exit();
  await new Promise((r) => setTimeout(r, 100));
  t.same({ poweredOff: w.poweredOff, calls: calls() }, { poweredOff: false, calls: 0 });
});

t.test('QEMU exits without a Shutdown event first (a crash, a destroy): not a power-off', async (t) => {
  const qemu = fakeQemu(t);
  const { w, calls } = watch(t);
  await w.track(qemu.pid);
  await qemu.exit();
  await new Promise((r) => setTimeout(r, 100));
  t.same({ poweredOff: w.poweredOff, calls: calls() }, { poweredOff: false, calls: 0 });
});

t.test("a live process at QEMU's PID is not taken for QEMU: its start time differs", async (t) => {
  // The PID is another process's by now: QEMU recorded with another start time than the one at that PID.
  const other = fakeQemu(t);
  const ticks = await processStartTicks(other.pid);
  const { w, until } = watch(t, { startTicksOf: async () => ticks - 1 });
  await w.track(other.pid);
  w.onLifecycle({ type: 'Shutdown', detail: 'Finished after guest request' });
  await until(() => w.poweredOff, 1000);
  t.ok(w.poweredOff, 'QEMU is gone though its PID is in use');
});

t.test('the same process at the PID (same start time) is QEMU still running', async (t) => {
  const qemu = fakeQemu(t);
  const { w } = watch(t, { watchForMs: 200 });
  await w.track(qemu.pid);
  w.onLifecycle({ type: 'Shutdown', detail: 'Finished after guest request' });
  await new Promise((r) => setTimeout(r, 300));
  t.notOk(w.poweredOff, 'not gone while it runs');
});
