// A VM's state through launcher.proto's encoding, as the agent receives it.
import t from 'tap';
import { loadLauncherService } from './load.js';
import { fromWireState, toWireState } from './types.js';
import { initialVmState, runStarted, type VmState } from '../state.js';

t.test("the state crosses the wire whole, the guest's readiness facts included", async (t) => {
  const method = loadLauncherService().service.GetState!;
  const state: VmState = {
    ...runStarted(initialVmState('/run/console.log'), { domainUuid: 'd', firmwareOnConsole: true, atUnixMs: 1_700_000_000_000 }),
    phase: 'Running',
    reason: 'Booted',
    domainState: 'running',
    qemuPid: 42,
    consoleOutputAtUnixMs: 1_700_000_000_500,
    guestAgentConnected: true,
    guestAgentConnectedAtUnixMs: 1_700_000_009_000,
  };
  const bytes = method.responseSerialize({ state: toWireState(state) });
  t.same(fromWireState((method.responseDeserialize(bytes) as { state: Parameters<typeof fromWireState>[0] }).state), state);
});
