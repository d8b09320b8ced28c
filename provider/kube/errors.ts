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

/** The apiserver's own message (Status.message) of a failed call, else the error's message. */
export function apiMessage(err: unknown): string {
  if (err instanceof ApiException) {
    try {
      const body: unknown = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
      const message = (body as { message?: unknown } | null)?.message;
      if (typeof message === 'string') return message;
    } catch {
      // not a Status body
    }
  }
  return err instanceof Error ? err.message : String(err);
}
