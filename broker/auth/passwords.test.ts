import { describe, expect, it } from 'vitest';
import { hashPassword, verifyPassword } from './passwords.js';

describe('password hashes', () => {
  it("hash at the broker's cost, scrypt N=2^15, r=8, p=1, unless told another cost", async () => {
    const stored = await hashPassword('correct horse');
    expect(stored).toMatch(/^scrypt\$32768\$8\$1\$[\w-]{22}\$[\w-]{43}$/);
    expect(await verifyPassword('correct horse', stored)).toBe(true);
    expect(await verifyPassword('correct horsE', stored)).toBe(false);
  });

  it('are checked at the cost the stored hash names (the test suite hashes its throwaway users cheaper)', async () => {
    const cheap = await hashPassword('correct horse', 2 ** 10);
    expect(cheap).toMatch(/^scrypt\$1024\$8\$1\$/);
    expect(await verifyPassword('correct horse', cheap)).toBe(true);
    expect(await verifyPassword('wrong horse', cheap)).toBe(false);
    // The same password and salt at another cost is another hash: the cost is part of what is checked.
    const [kind, , r, p, salt, hash] = cheap.split('$');
    expect(await verifyPassword('correct horse', [kind, 2048, r, p, salt, hash].join('$'))).toBe(false);
  });

  it('refuses a missing or foreign hash after the same work', async () => {
    expect(await verifyPassword('anything', null)).toBe(false);
    expect(await verifyPassword('anything', 'bcrypt$whatever')).toBe(false);
  });
});
