/** An error the API answers with: `{code, error, message, ...details}` (CONTRACT.md). */
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

export const badRequest = (message: string, details: Record<string, unknown> = {}, error = 'invalid_request') => new ApiError(400, error, message, details);
export const unauthorized = (message = 'Sign in first: send Authorization: Bearer <token>.', error = 'unauthorized') => new ApiError(401, error, message);
export const forbidden = (message: string, details: Record<string, unknown> = {}) => new ApiError(403, 'forbidden', message, details);
export const notFound = (what: string) => new ApiError(404, 'not_found', `${what} was not found.`);
export const conflict = (error: string, message: string, details: Record<string, unknown> = {}) => new ApiError(409, error, message, details);
export const tooLarge = (message: string) => new ApiError(413, 'too_large', message);
export const notImplemented = (call: string) =>
  new ApiError(501, 'not_implemented', `${call} is part of the specification but not built yet in this broker.`, { call });
