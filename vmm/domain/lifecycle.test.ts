import t from 'tap';
import { configureLifecycle } from './lifecycle.js';
import { applyBuilder, testSpec } from '../testing/specs.js';

t.test('power-off and crash end the domain, reboot restarts it', async (t) => {
  const { on_poweroff, on_reboot, on_crash } = applyBuilder(configureLifecycle, testSpec());
  t.same({ on_poweroff, on_reboot, on_crash }, { on_poweroff: 'destroy', on_reboot: 'restart', on_crash: 'destroy' });
});
