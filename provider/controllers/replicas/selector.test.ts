import t from 'tap';
import { selectorMatches, selectorString } from './selector.js';

t.test('a label selector matches as apimachinery evaluates it', async (t) => {
  const selector = {
    matchLabels: { app: 'web' },
    matchExpressions: [
      { key: 'tier', operator: 'In' as const, values: ['b', 'a'] },
      { key: 'legacy', operator: 'DoesNotExist' as const },
      { key: 'zone', operator: 'Exists' as const },
      { key: 'env', operator: 'NotIn' as const, values: ['dev'] },
    ],
  };
  const base = { app: 'web', tier: 'a', zone: 'z1' };
  t.same(
    {
      all: selectorMatches(selector, base),
      otherApp: selectorMatches(selector, { ...base, app: 'db' }),
      tierNotIn: selectorMatches(selector, { ...base, tier: 'c' }),
      legacy: selectorMatches(selector, { ...base, legacy: '' }),
      noZone: selectorMatches(selector, { app: 'web', tier: 'a' }),
      envDev: selectorMatches(selector, { ...base, env: 'dev' }),
      envProd: selectorMatches(selector, { ...base, env: 'prod' }),
      noLabels: selectorMatches(selector, undefined),
      emptySelector: selectorMatches({}, undefined),
    },
    {
      all: true,
      otherApp: false,
      tierNotIn: false,
      legacy: false,
      noZone: false,
      envDev: false,
      envProd: true,
      noLabels: false,
      emptySelector: true,
    },
  );
});

t.test('the canonical string sorts requirements by key and values within one, as labels.Selector.String()', async (t) => {
  t.equal(
    selectorString({
      matchLabels: { 'kubevirt.io/vmpool': 'p' },
      matchExpressions: [
        { key: 'tier', operator: 'In', values: ['b', 'a'] },
        { key: 'env', operator: 'NotIn', values: ['dev'] },
        { key: 'zone', operator: 'Exists' },
        { key: 'legacy', operator: 'DoesNotExist' },
      ],
    }),
    'env notin (dev),kubevirt.io/vmpool=p,!legacy,tier in (a,b),zone',
  );
});
