import t from 'tap';
import { INITIAL_READINESS, tally, type ProbeTally } from './probe-tally.js';

const runs = (start: ProbeTally, oks: boolean[], th = { successThreshold: 1, failureThreshold: 3 }) =>
  oks
    .reduce<ProbeTally[]>((acc, ok) => [...acc, tally(acc.at(-1) ?? start, { ok, message: ok ? undefined : 'refused' }, th)], [])
    .map((x) => x.result);

t.test('readiness starts failed', async (t) => {
  t.equal(INITIAL_READINESS.result, 'failure');
});

t.test('a result counts once it repeated its threshold in a row; until then the previous stands', async (t) => {
  t.same(
    runs(tally(INITIAL_READINESS, { ok: true }, { successThreshold: 1, failureThreshold: 3 }), [false, false, true, false, false, false]),
    ['success', 'success', 'success', 'success', 'success', 'failure'],
    '3 failures in a row, broken by a success',
  );
  t.same(runs(INITIAL_READINESS, [true, false, true], { successThreshold: 1, failureThreshold: 3 }), ['success', 'success', 'success']);
  t.same(runs(INITIAL_READINESS, [true, true, false, true, true], { successThreshold: 2, failureThreshold: 1 }), [
    'failure',
    'success',
    'failure',
    'failure',
    'success',
  ]);
});

t.test('the last failure says why; a success clears it', async (t) => {
  const failed = tally(INITIAL_READINESS, { ok: false, message: 'dial tcp: refused' }, { successThreshold: 1, failureThreshold: 1 });
  t.match(failed, { result: 'failure', message: 'dial tcp: refused' });
  t.notOk(tally(failed, { ok: true }, { successThreshold: 1, failureThreshold: 1 }).message);
});
