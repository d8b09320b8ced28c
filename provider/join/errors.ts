/** A join, token or reset step failed for a reason the operator fixes; the message says how. Printed without a stack. */
export class JoinError extends Error {
  readonly kind: string = 'JoinError';
}
