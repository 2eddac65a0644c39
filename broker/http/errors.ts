import { DomainError } from '../errors.js';
import { errorAnswer } from './statuses.js';

/**
 * An answer of the API that is HTTP's own rather than a service's (405 with Allow, a route's
 * answer about its request): `{code, error, message, ...details}` (CONTRACT.md). Services throw
 * DomainError (broker/errors.ts) instead, and only broker/http/ and route files import this module
 * (broker/errors.test.ts checks it).
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly details: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  toJSON(): Record<string, unknown> {
    return { code: this.status, error: this.error, message: this.message, ...this.details };
  }
}

/** A domain error as the API answers it: the status of its kind, Retry-After from `retryAfterSeconds`. */
export function apiErrorOf(err: DomainError): ApiError {
  const { status, headers } = errorAnswer(err);
  return new ApiError(status, err.code, err.message, err.details, headers);
}

/** What the API answers for an error, when it is one that says so (an ApiError or a domain error). */
export function answerOf(err: unknown): ApiError | undefined {
  if (err instanceof ApiError) return err;
  if (err instanceof DomainError) return apiErrorOf(err);
  return undefined;
}

// The names route files throw with: domain errors, answered through the table in statuses.ts.
export { invalid as badRequest, unauthenticated as unauthorized, forbidden, notFound, conflict, tooLarge, notImplemented } from '../errors.js';
