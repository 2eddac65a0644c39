import { describe, expect, it } from 'vitest';
import { ERROR_KINDS, forbidden, rateLimited } from '../errors.js';
import { answerOf, ApiError, apiErrorOf } from './errors.js';
import { errorAnswer, STATUS_OF_KIND } from './statuses.js';

describe('domain errors as HTTP answers', () => {
  it('every kind has a status of its own, an error status', () => {
    const statuses = ERROR_KINDS.map((kind) => STATUS_OF_KIND[kind]);
    expect(statuses.every((s) => s >= 400 && s < 600)).toBe(true);
    expect(new Set(statuses).size).toBe(ERROR_KINDS.length);
  });

  it('answers the CONTRACT.md shape, details beside code and message', () => {
    const err = forbidden('You can only grant what you hold yourself.', { missing: ['device:manage'] }, 'privilege_escalation');
    expect(errorAnswer(err)).toEqual({
      status: 403,
      body: { code: 403, error: 'privilege_escalation', message: 'You can only grant what you hold yourself.', missing: ['device:manage'] },
      headers: {},
    });
    expect(JSON.stringify(apiErrorOf(err))).toBe(
      '{"code":403,"error":"privilege_escalation","message":"You can only grant what you hold yourself.","missing":["device:manage"]}',
    );
  });

  it('when to try again is the Retry-After header, in seconds', () => {
    const answer = apiErrorOf(rateLimited('rate_limited', 'Too many attempts; try again in 1 minute.', 42, { retry_after: 42 }));
    expect([answer.status, answer.headers, answer.toJSON()]).toEqual([
      429,
      { 'Retry-After': '42' },
      { code: 429, error: 'rate_limited', message: 'Too many attempts; try again in 1 minute.', retry_after: 42 },
    ]);
    expect(apiErrorOf(rateLimited('too_many_requests', 'Too many.')).headers).toEqual({});
  });

  it("HTTP's own answers pass as they are; other errors are none of ours", () => {
    const own = new ApiError(405, 'method_not_allowed', 'No.', { allow: ['GET'] }, { Allow: 'GET' });
    expect(answerOf(own)).toBe(own);
    expect(answerOf(new Error('boom'))).toBeUndefined();
  });
});
