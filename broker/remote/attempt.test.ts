import { describe, expect, it } from 'vitest';
import { forbidden, rateLimited, unauthenticated } from '../errors.js';
import { fromDomainError } from './attempt.js';

describe('a domain error as a remote session refusal', () => {
  it('carries the status of its kind in the frame and as the close code, its code as the error', () => {
    expect(fromDomainError(unauthenticated('The ticket is unknown, used or expired.', 'invalid_ticket'))).toEqual({
      ok: false,
      frame: { type: 'error', code: 401, error: 'invalid_ticket', message: 'The ticket is unknown, used or expired.' },
      code: 4401,
    });
    const denied = fromDomainError(forbidden('Not allowed: no grant.', { device_id: 'd1' }));
    expect([denied.code, denied.frame]).toEqual([4403, { type: 'error', code: 403, error: 'forbidden', message: 'Not allowed: no grant.', device_id: 'd1' }]);
  });

  it('when to try again is no field of the frame unless its details say so', () => {
    const refusal = fromDomainError(rateLimited('too_many_tickets', 'Too many.', 60));
    expect([refusal.code, refusal.frame]).toEqual([4429, { type: 'error', code: 429, error: 'too_many_tickets', message: 'Too many.' }]);
  });
});
