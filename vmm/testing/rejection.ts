// Awaits a promise that must reject and returns the reason, so a test can
// t.match the whole error shape (kind, causes) in one assertion.
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected the promise to reject, but it resolved');
}
