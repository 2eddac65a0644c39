/**
 * What a service throws when it refuses a request or fails: a domain error. Its `kind` (a closed
 * list) says what sort of outcome it is, its `code` says which one (stable: clients branch on it,
 * e.g. `privilege_escalation`), its message is for people. Nothing here knows HTTP: broker/http/
 * maps each kind to a status (broker/http/statuses.ts) and answers with the CONTRACT.md shape, and
 * the WebSocket paths answer from the same kind and code. A leaf module: it imports nothing.
 */

/** The kinds of domain error; each has one HTTP status, given in broker/http/statuses.ts. */
export const ERROR_KINDS = [
  /** the request is malformed, or asks for something that cannot be (a bad field, a bad feed) */
  'invalid',
  /** no credential, or one that is bad, expired or revoked; or a sign-in step still to take */
  'unauthenticated',
  /** the caller is known but may not do this (a permission, a grant, a key it does not hold) */
  'forbidden',
  /** what the request names does not exist, or the caller may not know it does */
  'not_found',
  /** the request contradicts the current state: taken, already decided, not configured */
  'conflict',
  /** the request, or what it would make, is over a limit of size (a quota) */
  'too_large',
  /** too many requests or attempts: try again later (`retryAfterSeconds` says when, if known) */
  'rate_limited',
  /** the broker failed (the audit trail could not be written): the request was not done */
  'internal',
  /** part of the specification, not built in this broker */
  'not_implemented',
  /** a device or an outside service (Stripe) failed or refused what the broker asked of it */
  'upstream_failed',
  /** the broker cannot do it for now (mail could not be sent, no free code): try again shortly */
  'unavailable',
] as const;
export type ErrorKind = (typeof ERROR_KINDS)[number];

/** Kinds that are the broker or what it depends on failing, not the request being refused. */
const FAILURE_KINDS: ReadonlySet<ErrorKind> = new Set(['internal', 'not_implemented', 'upstream_failed', 'unavailable']);

/** Facts about an error that are not its details, which the transports render their own way. */
export interface ErrorExtras {
  /** when to try again, in seconds (REST answers it as the Retry-After header) */
  retryAfterSeconds?: number;
}

export class DomainError extends Error {
  constructor(
    readonly kind: ErrorKind,
    /** stable, machine-readable: what clients and code branch on */
    readonly code: string,
    message: string,
    /** fields the answer carries beside code and message (`field`, `device_id`, `attempts_left` …) */
    readonly details: Record<string, unknown> = {},
    readonly extras: ErrorExtras = {},
  ) {
    super(message);
    this.name = 'DomainError';
  }

  /** The same error told differently: a caller that knows more (which change, which field) says so. */
  rephrased(message: string, details: Record<string, unknown> = this.details): DomainError {
    return new DomainError(this.kind, this.code, message, details, this.extras);
  }
}

/** A refusal of the request (the caller could change it), as opposed to a failure on the broker's side. */
export function isRefusal(err: unknown): err is DomainError {
  return err instanceof DomainError && !FAILURE_KINDS.has(err.kind);
}

export const invalid = (message: string, details: Record<string, unknown> = {}, code = 'invalid_request') => new DomainError('invalid', code, message, details);

export const unauthenticated = (message = 'Sign in first: send Authorization: Bearer <token>.', code = 'unauthorized', details: Record<string, unknown> = {}) =>
  new DomainError('unauthenticated', code, message, details);

export const forbidden = (message: string, details: Record<string, unknown> = {}, code = 'forbidden') => new DomainError('forbidden', code, message, details);

/** `what` names it for people: notFound(`Device ${id}`) → "Device … was not found." */
export const notFound = (what: string) => new DomainError('not_found', 'not_found', `${what} was not found.`);

export const conflict = (code: string, message: string, details: Record<string, unknown> = {}) => new DomainError('conflict', code, message, details);

export const tooLarge = (message: string, code = 'too_large', details: Record<string, unknown> = {}) => new DomainError('too_large', code, message, details);

export const rateLimited = (code: string, message: string, retryAfterSeconds?: number, details: Record<string, unknown> = {}) =>
  new DomainError('rate_limited', code, message, details, retryAfterSeconds === undefined ? {} : { retryAfterSeconds });

export const unavailable = (code: string, message: string) => new DomainError('unavailable', code, message);

export const upstreamFailed = (code: string, message: string, details: Record<string, unknown> = {}) =>
  new DomainError('upstream_failed', code, message, details);

export const internal = (code: string, message: string) => new DomainError('internal', code, message);

export const notImplemented = (call: string) =>
  new DomainError('not_implemented', 'not_implemented', `${call} is part of the specification but not built yet in this broker.`, { call });
