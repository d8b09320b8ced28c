// Classifies Kubernetes API failures once, so callers branch on kinds rather
// than on status numbers or message strings.
import { ApiException } from '@kubernetes/client-node';

export function apiStatusCode(err: unknown): number | undefined {
  if (err instanceof ApiException) return err.code;
  const code = (err as { code?: unknown; statusCode?: unknown } | null)?.code ?? (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

export const isNotFound = (err: unknown): boolean => apiStatusCode(err) === 404;
export const isConflict = (err: unknown): boolean => apiStatusCode(err) === 409;
export const isAlreadyExists = isConflict;

/** The apiserver's Status body of a failed call, when it sent one. */
function statusBody(err: unknown): { message?: unknown; details?: { causes?: Array<{ reason?: unknown }> } } | undefined {
  if (!(err instanceof ApiException)) return undefined;
  try {
    const body: unknown = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
    return typeof body === 'object' && body !== null ? body : undefined;
  } catch {
    return undefined; // not a Status body
  }
}

/**
 * The apiserver's own message (Status.message) of a failed call, else the error's message. Record this, never
 * an ApiException's message: that carries the response headers (audit-id, date), new on every attempt, so a
 * status written from it changes each time and its watch event requeues the writer at once.
 */
export function apiMessage(err: unknown): string {
  const message = statusBody(err)?.message;
  if (typeof message === 'string') return message;
  return err instanceof Error ? err.message : String(err);
}

/** A create refused because its namespace is being deleted: it can never succeed, so it is not retried. */
export const isNamespaceTerminating = (err: unknown): boolean =>
  apiStatusCode(err) === 403 && !!statusBody(err)?.details?.causes?.some((c) => c.reason === 'NamespaceTerminating');
