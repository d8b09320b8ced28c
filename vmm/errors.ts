// Error classes of the VMM. Each has a `kind` so callers branch on kind, never
// on message text; they are mapped to HTTP codes, gRPC statuses or
// requeue-versus-terminal only at the edges.

/** Kubernetes StatusCause types, so the provider can pass causes through unchanged. */
export type SpecCauseReason =
  | 'FieldValueRequired'
  | 'FieldValueInvalid'
  | 'FieldValueDuplicate'
  | 'FieldValueNotSupported'
  | 'FieldValueNotFound'
  | 'FieldValueForbidden';

export interface SpecCause {
  /** Field path inside VmSpec, e.g. `disks[1].bus`. */
  path: string;
  reason: SpecCauseReason;
  message: string;
}

/** The spec cannot run as written; retrying will not help. Carries every cause found. */
export class SpecError extends Error {
  readonly kind = 'SpecError';
  constructor(
    readonly causes: SpecCause[],
    options?: ErrorOptions,
  ) {
    super(`invalid VM spec: ${causes.map((c) => `${c.path}: ${c.message}`).join('; ')}`, options);
  }
}

/** A host program (qemu-img, genisoimage) exited non-zero or could not start. */
export class CommandError extends Error {
  readonly kind = 'CommandError';
  constructor(
    readonly argv: readonly string[],
    readonly exitCode: number | null,
    readonly stderr: string,
    options?: ErrorOptions,
  ) {
    super(`${argv.join(' ')} failed${exitCode === null ? '' : ` (exit ${exitCode})`}: ${stderr.trim() || 'no output'}`, options);
  }
}

/** An image download failed. `status` is set when the server answered with a non-2xx code. */
export class DownloadError extends Error {
  readonly kind = 'DownloadError';
  /** Set when retrying cannot help (a refused address, an image over the cap): the spec's field is at fault. */
  readonly permanent?: SpecCauseReason;
  constructor(
    readonly url: string,
    message: string,
    readonly status?: number,
    options?: ErrorOptions & { permanent?: SpecCauseReason },
  ) {
    super(`download of ${url} failed: ${message}`, options);
    if (options?.permanent) this.permanent = options.permanent;
  }
}

/** The DomainRuntime handed to the builders does not match the spec: a launcher bug, not a user error. */
export class RuntimeMismatchError extends Error {
  readonly kind = 'RuntimeMismatchError';
}
