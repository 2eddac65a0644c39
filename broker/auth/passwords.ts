import crypto from 'node:crypto';
import { promisify } from 'node:util';

const scrypt = promisify(crypto.scrypt) as (pw: crypto.BinaryLike, salt: crypto.BinaryLike, len: number, o: crypto.ScryptOptions) => Promise<Buffer>;

// scrypt is memory-hard: N=2^15, r=8 uses 32 MiB a hash.
const N = 2 ** 15;
const R = 8;
const P = 1;
const KEYLEN = 32;
const MAXMEM = 64 * 1024 * 1024;

export const MIN_PASSWORD_LENGTH = 8;

/**
 * `scrypt$N$r$p$salt$hash`, base64url parts. The broker always hashes at `N` (2^15); `cost` is for the
 * test suite's throwaway users only (test/support/broker.ts), whose thousands of sign-ins would
 * otherwise spend minutes of CPU on it. A stored hash carries its own N, which verifyPassword reads.
 */
export async function hashPassword(password: string, cost: number = N): Promise<string> {
  const salt = crypto.randomBytes(16);
  const hash = await scrypt(password.normalize('NFKC'), salt, KEYLEN, { N: cost, r: R, p: P, maxmem: MAXMEM });
  return `scrypt$${cost}$${R}$${P}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

export async function verifyPassword(password: string, stored: string | null): Promise<boolean> {
  if (!stored) {
    // Spend the same time as a real check so absent users are not told apart by timing.
    await scrypt(password, 'absent-user-salt', KEYLEN, { N, r: R, p: P, maxmem: MAXMEM });
    return false;
  }
  const [kind, n, r, p, salt, hash] = stored.split('$');
  if (kind !== 'scrypt') return false;
  const expected = Buffer.from(hash, 'base64url');
  const actual = await scrypt(password.normalize('NFKC'), Buffer.from(salt, 'base64url'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: MAXMEM,
  });
  return crypto.timingSafeEqual(actual, expected);
}

/** sha256 hex of a secret we keep only as a hash (refresh tokens, challenges, links). */
export function digest(secret: string): string {
  return crypto.createHash('sha256').update(secret).digest('hex');
}

export function randomToken(bytes = 32): string {
  return crypto.randomBytes(bytes).toString('base64url');
}
