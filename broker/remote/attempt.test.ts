import { describe, expect, it } from 'vitest';
import { forbidden, rateLimited, unauthenticated } from '../errors.js';
import { fromDomainError, ParsedQueries, PARSED_QUERIES_KEPT, PARSED_QUERY_MAX_LENGTH } from './attempt.js';

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

describe('the queries of attempts, parsed once (ninth round)', () => {
  const url = (query: string) => new URL(`http://broker/api/v2/remote/tunnel?${query}`);
  const dev = 'a'.repeat(64);
  const tunnel = `device_id=${dev}&port=22&dst=127.0.0.1`;

  it('parses a query seen again once, and answers the same data, frozen', () => {
    const queries = new ParsedQueries();
    const first = queries.parse('tunnel', url(tunnel));
    const second = queries.parse('tunnel', url(tunnel));
    expect(queries.parses).toBe(1);
    expect(first).toEqual({ success: true, data: { device_id: dev, port: 22, dst: '127.0.0.1', proto: 'tcp' } });
    expect(second.success && second.data).toBe(first.success && first.data);
    expect(Object.isFrozen(second.success && second.data)).toBe(true);
    expect(() => Object.assign(second.success ? (second.data as object) : {}, { port: 23 })).toThrow();
    // Another kind with the same text is a parse of its own.
    expect(queries.parse('console', url(`device_id=${dev}`)).success).toBe(true);
    expect(queries.parses).toBe(2);
  });

  it('keeps no query that does not parse, carries a ticket, or is too long: each is parsed every time', () => {
    const queries = new ParsedQueries();
    const bad = `device_id=${dev}&port=99999`;
    const ticket = `${tunnel}&ticket=t1`;
    const long = `${tunnel}&pad=${'x'.repeat(PARSED_QUERY_MAX_LENGTH)}`;
    for (let i = 0; i < 3; i++) {
      const refused = queries.parse('tunnel', url(bad));
      expect(refused.success).toBe(false);
      expect(queries.parse('tunnel', url(ticket)).success).toBe(true);
      expect(queries.parse('tunnel', url(long)).success).toBe(true);
    }
    expect(queries.parses).toBe(9);
  });

  it('a client sending a new query every time keeps at most PARSED_QUERIES_KEPT, the oldest dropped', () => {
    const queries = new ParsedQueries();
    for (let i = 0; i < PARSED_QUERIES_KEPT * 4; i++) queries.parse('tunnel', url(`device_id=${dev}&port=${1 + i}`));
    expect(queries.size).toBe(PARSED_QUERIES_KEPT);
    const parses = queries.parses;
    queries.parse('tunnel', url(`device_id=${dev}&port=${PARSED_QUERIES_KEPT * 4}`)); // the newest: kept
    queries.parse('tunnel', url(`device_id=${dev}&port=1`)); // the oldest: dropped long ago
    expect(queries.parses).toBe(parses + 1);
  });
});
