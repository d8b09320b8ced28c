// The driver's one error class: a CSI error is a gRPC status code plus a
// message naming the field or the object. Handlers throw it; server.ts turns
// it into the status, so no handler builds a gRPC error itself.
import { status } from '@grpc/grpc-js';

export type CsiCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'FAILED_PRECONDITION'
  | 'OUT_OF_RANGE'
  | 'RESOURCE_EXHAUSTED'
  | 'ABORTED'
  | 'INTERNAL';

export class CsiError extends Error {
  constructor(
    readonly code: CsiCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'CsiError';
  }

  get grpcCode(): status {
    return status[this.code];
  }
}

export const invalid = (field: string, reason: string) => new CsiError('INVALID_ARGUMENT', `${field}: ${reason}`);
export const notFound = (what: string) => new CsiError('NOT_FOUND', `${what} does not exist`);
