// The subresource API's failures as metav1.Status, worded as KubeVirt's
// virt-api words them (k8s.io/apimachinery's errors.New* on
// v1.Resource("virtualmachine"), group kubevirt.io): virtctl prints the
// message as it is. Error kinds become HTTP codes here and only here.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { apiMessage, apiStatusCode } from '../kube/errors.js';

export type StatusReason = 'Unauthorized' | 'Forbidden' | 'NotFound' | 'Conflict' | 'BadRequest' | 'InternalError' | 'ServiceUnavailable';

const CODES: Readonly<Record<StatusReason, number>> = {
  Unauthorized: 401,
  Forbidden: 403,
  NotFound: 404,
  Conflict: 409,
  BadRequest: 400,
  InternalError: 500,
  ServiceUnavailable: 503,
};

/** The singular resource KubeVirt names in its errors. */
export type KubevirtResource = 'virtualmachine' | 'virtualmachineinstance';

export interface Status {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure';
  message: string;
  reason: StatusReason;
  details?: { name: string; group: string; kind: string };
  code: number;
}

export class StatusError extends Error {
  readonly code: number;
  constructor(
    readonly reason: StatusReason,
    message: string,
    readonly details?: { name: string; kind: KubevirtResource },
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.code = CODES[reason];
  }

  toStatus(): Status {
    return {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      ...(this.details ? { details: { name: this.details.name, group: 'kubevirt.io', kind: this.details.kind } } : {}),
      code: this.code,
    };
  }
}

export const notFound = (kind: KubevirtResource, name: string): StatusError =>
  new StatusError('NotFound', `${kind}.kubevirt.io "${name}" not found`, { name, kind });

/** errors.NewConflict: the operation is refused in the object's current state. */
export const conflict = (kind: KubevirtResource, name: string, why: string): StatusError =>
  new StatusError('Conflict', `Operation cannot be fulfilled on ${kind}.kubevirt.io "${name}": ${why}`, { name, kind });

export const badRequest = (message: string): StatusError => new StatusError('BadRequest', message);

export const unauthorized = (message = 'Unauthorized'): StatusError => new StatusError('Unauthorized', message);

export const forbidden = (message: string): StatusError => new StatusError('Forbidden', message);

/** A failed call to the Kubernetes API, as the Status the subresource API answers with. */
export function fromApiError(err: unknown, kind: KubevirtResource, name: string): StatusError {
  const code = apiStatusCode(err);
  if (code === 404) return notFound(kind, name);
  // A JSON-patch test that no longer holds: someone else changed the state meanwhile.
  if (code === 409 || code === 422) return conflict(kind, name, apiMessage(err));
  return new StatusError('InternalError', `Internal error occurred: ${apiMessage(err)}`, undefined, { cause: err });
}

export function errorHandler(err: FastifyError | StatusError | Error, req: FastifyRequest, reply: FastifyReply): void {
  let status: StatusError;
  if (err instanceof StatusError) status = err;
  else {
    const code = (err as FastifyError).statusCode;
    // Fastify's own 4xx (a body that is not JSON, a schema mismatch) are the client's to fix.
    status =
      typeof code === 'number' && code >= 400 && code < 500
        ? badRequest(err.message)
        : new StatusError('InternalError', 'Internal error occurred', undefined, { cause: err });
  }
  if (status.code >= 500) req.log.error({ err, url: req.url }, 'subresource request failed');
  else req.log.debug({ status: status.code, reason: status.reason, msg: status.message, url: req.url }, 'subresource request refused');
  void reply.code(status.code).type('application/json').send(status.toStatus());
}
