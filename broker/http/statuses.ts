import type { DomainError, ErrorKind } from '../errors.js';

/**
 * The HTTP status of each kind of domain error (broker/errors.ts): the one table. REST answers use
 * it (errors.ts), and so do the WebSocket paths whose error frames and close codes carry the same
 * numbers (a remote session's `{"type":"error","code":403,…}` and close code 4403).
 */
export const STATUS_OF_KIND: Readonly<Record<ErrorKind, number>> = {
  invalid: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  rate_limited: 429,
  internal: 500,
  not_implemented: 501,
  upstream_failed: 502,
  unavailable: 503,
};

/** A domain error as the API answers it: its status, the CONTRACT.md body and the headers. */
export interface ErrorAnswer {
  status: number;
  /** `{code, error, message, ...details}` */
  body: Record<string, unknown>;
  headers: Record<string, string>;
}

export function errorAnswer(err: DomainError): ErrorAnswer {
  const status = STATUS_OF_KIND[err.kind];
  const headers: Record<string, string> = {};
  if (err.extras.retryAfterSeconds !== undefined) headers['Retry-After'] = String(err.extras.retryAfterSeconds);
  return { status, body: { code: status, error: err.code, message: err.message, ...err.details }, headers };
}
