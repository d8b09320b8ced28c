// Error kinds the launcher raises. server.ts maps each kind to one gRPC status
// code; nothing else looks at them. Spec problems use SpecError from vmm/.

/** The request does not fit the VM's current state (gRPC FAILED_PRECONDITION). */
export class PreconditionError extends Error {
  readonly kind = 'Precondition';
  constructor(
    message: string,
    /** Spec fields that caused the refusal, e.g. ['memoryMiB']; empty when not about fields. */
    readonly fieldPaths: string[] = [],
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** A dependency is not ready; the same call can succeed later (gRPC UNAVAILABLE). */
export class UnavailableError extends Error {
  readonly kind = 'Unavailable';
}

/** An operation ran past its own deadline (gRPC DEADLINE_EXCEEDED). */
export class TimeoutError extends Error {
  readonly kind = 'Timeout';
}

/** A request field other than the VM spec is invalid (gRPC INVALID_ARGUMENT, the fields in metadata). */
export class InvalidArgumentError extends Error {
  readonly kind = 'InvalidArgument';
  constructor(
    message: string,
    readonly fieldPaths: string[],
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
