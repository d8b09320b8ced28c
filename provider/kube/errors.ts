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
