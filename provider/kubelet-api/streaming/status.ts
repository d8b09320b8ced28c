// The metav1.Status an exec/attach session ends with, on the error stream.
// client-go (remotecommand errorDecoderV4) turns Failure/NonZeroExitCode with
// an ExitCode cause into "command terminated with exit code N" and any other
// Failure into an error carrying `message`; Success means exit code 0.
import { NotFoundError } from '../errors.js';
import { NoGuestAgentError } from '../vm-access.js';
import type { ProtocolTraits } from './negotiate.js';
import { SessionIdleError } from './idle-timer.js';

export interface StatusCause {
  /** metav1.StatusCause.Type; its JSON name is "reason". */
  reason?: string;
  message: string;
}

export interface Status {
  metadata: Record<string, never>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  details?: { causes: StatusCause[] };
  code?: number;
}

export const success = (): Status => ({ metadata: {}, status: 'Success' });

export function exitStatus(exitCode: number): Status {
  if (exitCode === 0) return success();
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: ${exitCode}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
  };
}

export function failure(message: string, reason: string, code: number): Status {
  return { metadata: {}, status: 'Failure', message, reason, code };
}

/** Shaped like apierrors.NewInternalError, which the kubelet sends when exec fails to run. */
export function internalError(message: string): Status {
  return { ...failure(`Internal error occurred: ${message}`, 'InternalError', 500), details: { causes: [{ message }] } };
}

/** Error kinds become session statuses here and only here. */
export function statusFromError(err: unknown): Status {
  if (err instanceof NoGuestAgentError) return failure(err.message, 'BadRequest', 400);
  if (err instanceof NotFoundError) return failure(err.message, 'NotFound', 404);
  // 408: the server closes a connection nobody uses (RFC 9110).
  if (err instanceof SessionIdleError) return failure(err.message, 'Timeout', 408);
  return internalError(`error executing command in container: ${err instanceof Error ? err.message : String(err)}`);
}

/**
 * The bytes for the error stream: JSON from v4 on; before that the message of
 * a failure only, and nothing for success.
 */
export function encodeStatus(status: Status, traits: ProtocolTraits): Buffer {
  if (traits.jsonStatus) return Buffer.from(JSON.stringify(status));
  return Buffer.from(status.status === 'Success' ? '' : (status.message ?? 'unknown error'));
}
