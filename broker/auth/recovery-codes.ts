/**
 * Recovery codes of an authenticator app, as Teleport and GitHub offer them: issued when the app is
 * confirmed (and again on request), shown once, each good for one sign-in in place of an app code.
 *
 * A code is 16 characters of Crockford's base32 (80 random bits), shown as `xxxx-xxxx-xxxx-xxxx`.
 * The store keeps sha256(`recovery:<user id>:<code>`) only. A fast hash is enough here: scrypt
 * (as for passwords) slows down guessing a secret people choose, but nobody can enumerate 2^80
 * codes, and a lookup by hash lets a sign-in try its code against the user's ten in one indexed
 * query. Binding the user id into the hash means a code of one user never matches another's.
 */
import crypto from 'node:crypto';
import type { Db } from '../db/database.js';
import { digest } from './passwords.js';

/** How many codes a set holds. */
export const RECOVERY_CODE_COUNT = 10;
/** Crockford's base32: no I, L, O, U, so nothing reads as another character. */
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
const LENGTH = 16;

/** A code as the user may type it: any case, with or without the dashes and spaces. */
const TYPED = /^[0-9a-z]{4}([- ]?[0-9a-z]{4}){3}$/i;

function newCode(): string {
  const bytes = crypto.randomBytes(LENGTH);
  let code = '';
  for (let i = 0; i < LENGTH; i++) code += ALPHABET[bytes[i] & 31];
  return code.match(/.{4}/g)!.join('-');
}

/** The code without dashes, spaces or case, Crockford's look-alikes read as the digits they stand for; null when it is not a recovery code's shape. */
export function normalizeRecoveryCode(typed: string): string | null {
  const trimmed = typed.trim();
  if (!TYPED.test(trimmed)) return null;
  return trimmed.toLowerCase().replace(/[- ]/g, '').replace(/[o]/g, '0').replace(/[il]/g, '1');
}

/** Whether what was typed at sign-in has the shape of a recovery code (not of a 6-digit app code). */
export const looksLikeRecoveryCode = (typed: string): boolean => normalizeRecoveryCode(typed) !== null;

const hashOf = (userId: string, normalized: string) => digest(`recovery:${userId}:${normalized}`);

export class RecoveryCodes {
  constructor(private readonly db: Db) {}

  /** A new set for the user: every earlier code (used or not) stops working. Returns the codes, to show once. */
  async issue(userId: string, trx: Db = this.db, now = new Date()): Promise<string[]> {
    const codes = Array.from({ length: RECOVERY_CODE_COUNT }, newCode);
    await trx.deleteFrom('recovery_codes').where('user_id', '=', userId).execute();
    await trx
      .insertInto('recovery_codes')
      .values(codes.map((code) => ({ user_id: userId, code_hash: hashOf(userId, normalizeRecoveryCode(code)!), created_at: now.toISOString(), used_at: null })))
      .execute();
    return codes;
  }

  /**
   * Spends one of the user's unused codes. Returns how many are left after it, or null when the
   * code is not one of them (wrong, used, another user's). Two sign-ins racing with one code: one wins.
   */
  async use(userId: string, typed: string, now = new Date()): Promise<number | null> {
    const normalized = normalizeRecoveryCode(typed);
    if (normalized === null) return null;
    const spent = await this.db
      .updateTable('recovery_codes')
      .set({ used_at: now.toISOString() })
      .where('user_id', '=', userId)
      .where('code_hash', '=', hashOf(userId, normalized))
      .where('used_at', 'is', null)
      .executeTakeFirst();
    if (Number(spent.numUpdatedRows) !== 1) return null;
    return this.left(userId);
  }

  /** Unused codes of the user. */
  async left(userId: string, trx: Db = this.db): Promise<number> {
    const row = await trx
      .selectFrom('recovery_codes')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('user_id', '=', userId)
      .where('used_at', 'is', null)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async remove(userId: string, trx: Db = this.db): Promise<void> {
    await trx.deleteFrom('recovery_codes').where('user_id', '=', userId).execute();
  }
}
