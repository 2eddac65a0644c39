import { describe, expect, it } from 'vitest';
import { describeProblem } from './service.js';

describe('describeProblem', () => {
  it('names the resource unless the problem is a syntax error, whose message names it already (by code, not by wording)', () => {
    expect(describeProblem({ policy: 0, permission: 'device:read', resource: 'tag:%', code: 'resource_syntax', message: 'reworded: bad tag' })).toBe(
      'policy 1 (device:read): reworded: bad tag',
    );
    expect(
      describeProblem({
        policy: 1,
        permission: 'users:read',
        resource: 'tag:prod',
        code: 'resources_not_accepted',
        message: 'resource "x" reads like a syntax error',
      }),
    ).toBe('policy 2 (users:read), resource "tag:prod": resource "x" reads like a syntax error');
  });
});
