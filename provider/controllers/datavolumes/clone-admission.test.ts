import t from 'tap';
import { createdUnderPolicy, POLICY_PROPAGATION_MS } from './clone-admission.js';

const policySince = Date.parse('2026-11-28T09:00:00Z');

t.test('an object created once the policy had time to take effect was admitted under it', async (t) => {
  t.equal(createdUnderPolicy(policySince + POLICY_PROPAGATION_MS, policySince), true);
  t.equal(createdUnderPolicy(policySince + 3_600_000, policySince), true);
});

t.test('an object created before the policy, or while the apiserver may not enforce it yet, was not', async (t) => {
  t.equal(createdUnderPolicy(policySince - 1000, policySince), false, 'created before the policy');
  t.equal(createdUnderPolicy(policySince + POLICY_PROPAGATION_MS - 1, policySince), false, 'created as the policy propagated');
});

t.test('without the policy (or its binding), or without a creation time, nothing was admitted', async (t) => {
  t.equal(createdUnderPolicy(policySince, undefined), false);
  t.equal(createdUnderPolicy(undefined, policySince), false);
});
