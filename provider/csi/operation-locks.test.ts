import t from 'tap';
import { CsiError } from './errors.js';
import { OperationLocks } from './operation-locks.js';

t.test('OperationLocks: a second operation on a busy key is ABORTED; keys free again after the first ends, however it ends', async (t) => {
  const locks = new OperationLocks();
  let release!: () => void;
  const first = locks.run(['vol-a', 'name:x'], () => new Promise<string>((resolve) => (release = () => resolve('first'))));
  const codeOf = (p: Promise<unknown>) =>
    p.then(
      () => 'ok',
      (err: unknown) => (err instanceof CsiError ? err.code : String(err)),
    );
  const whileBusy = await Promise.all([
    codeOf(locks.run(['vol-a'], async () => 'x')),
    codeOf(locks.run(['name:x', 'vol-b'], async () => 'x')),
    codeOf(locks.run(['vol-b', ''], async () => 'x')),
  ]);
  release();
  const firstResult = await first;
  const failed = await codeOf(locks.run(['vol-a'], async () => Promise.reject(new Error('boom'))));
  t.same(
    { whileBusy, first: firstResult, failed, after: await codeOf(locks.run(['vol-a', 'name:x'], async () => 'x')) },
    { whileBusy: ['ABORTED', 'ABORTED', 'ok'], first: 'first', failed: 'Error: boom', after: 'ok' },
  );
});
