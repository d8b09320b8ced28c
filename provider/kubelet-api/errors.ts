// Error kinds map to HTTP status codes here and only here.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { SessionLimitError } from './session-limiter.js';

export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export class UnauthorizedError extends HttpError {
  readonly kind = 'Unauthorized';
  constructor(message = 'Unauthorized') {
    super(401, message);
  }
}

export class ForbiddenError extends HttpError {
  readonly kind = 'Forbidden';
  constructor(message: string) {
    super(403, message);
  }
}

export class NotFoundError extends HttpError {
  readonly kind = 'NotFound';
  constructor(message: string, options?: { cause?: unknown }) {
    super(404, message, options);
  }
}

export class BadRequestError extends HttpError {
  readonly kind = 'BadRequest';
  constructor(message: string) {
    super(400, message);
  }
}

/** The request does not fit the object's current state (a guest agent that is not connected). */
export class ConflictError extends HttpError {
  readonly kind = 'Conflict';
  constructor(message: string, options?: { cause?: unknown }) {
    super(409, message, options);
  }
}

/** A dependency is not ready; the same request can succeed later (a guest agent that does not answer). */
export class UnavailableError extends HttpError {
  readonly kind = 'Unavailable';
  constructor(message: string, options?: { cause?: unknown }) {
    super(503, message, options);
  }
}

export function errorHandler(err: FastifyError | HttpError | Error, req: FastifyRequest, reply: FastifyReply): void {
  if (err instanceof SessionLimitError) {
    req.log.debug({ err: err.message, limit: err.limit }, 'streaming session refused');
    // A metav1.Status: kube-apiserver decodes one from a refused exec/attach
    // upgrade and relays its message to kubectl as it is (a text body would
    // reach it as "unable to upgrade connection: …").
    void reply.code(429).type('application/json').send({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: err.message,
      reason: 'TooManyRequests',
      code: 429,
    });
    return;
  }
  const fastifyCode = (err as FastifyError).statusCode;
  // An HttpError is an answer the API chose (a 503 included); anything else that fails is a 500 without details.
  const chosen = err instanceof HttpError;
  const status = chosen ? err.statusCode : typeof fastifyCode === 'number' && fastifyCode < 500 ? fastifyCode : 500;
  if (!chosen && status >= 500) req.log.error({ err }, 'kubelet API request failed');
  else req.log.debug({ err: err.message, status }, 'kubelet API request rejected');
  void reply
    .code(status)
    .type('text/plain; charset=utf-8')
    .send(chosen || status < 500 ? err.message : 'Internal Server Error');
}
