import crypto from 'node:crypto';
import type { SecondFactorProvider } from '../../shared/api-types.js';
import type { Db } from '../db/database.js';
import type { ChallengesTable } from '../db/schema.js';
import { DomainError, rateLimited } from '../errors.js';
import { digest, randomToken } from './passwords.js';

/** A challenge lives five minutes from its issue. */
export const CHALLENGE_TTL_MS = 5 * 60_000;
/** Wrong codes a challenge (and the challenges it was renewed into) survives. */
export const MAX_CODE_ATTEMPTS = 5;

export type Challenge = ChallengesTable;

const unknownChallenge = () => new DomainError('unauthenticated', 'invalid_challenge', 'The challenge is unknown; sign in again to get a new one.');
const usedChallenge = () => new DomainError('unauthenticated', 'challenge_used', 'The challenge was already used; sign in again to get a new one.');
const burnedChallenge = () =>
  rateLimited('too_many_attempts', `Too many wrong codes (${MAX_CODE_ATTEMPTS}) for this challenge; sign in again to get a new one.`);

/**
 * Second-factor challenges. The client holds an opaque random string; the store keeps only its
 * sha256. A challenge is issued after the password ('login' stage), renewed once a provider is
 * chosen ('code' stage, the old one is spent), and spent for good when its code is accepted.
 */
export class ChallengeStore {
  constructor(private readonly db: Db) {}

  /** The first challenge, after a correct password. */
  async open(userId: string, now = new Date()): Promise<string> {
    // Rows are small, but a stream of password logins must not grow the table without bound.
    await this.db
      .deleteFrom('challenges')
      .where('expires_at', '<', new Date(now.getTime() - 86_400_000).toISOString())
      .execute();
    const challenge = randomToken();
    await this.db
      .insertInto('challenges')
      .values({
        id_hash: digest(challenge),
        user_id: userId,
        stage: 'login',
        provider: null,
        code_hash: null,
        attempts: 0,
        expires_at: new Date(now.getTime() + CHALLENGE_TTL_MS).toISOString(),
        used_at: null,
      })
      .execute();
    return challenge;
  }

  /** The stored challenge, if it can still be used; otherwise a 401/429 that says why. */
  async find(challenge: string, now = new Date()): Promise<Challenge> {
    const row = await this.db.selectFrom('challenges').selectAll().where('id_hash', '=', digest(challenge)).executeTakeFirst();
    if (!row) throw unknownChallenge();
    if (row.used_at) throw usedChallenge();
    if (row.attempts >= MAX_CODE_ATTEMPTS) throw burnedChallenge();
    if (row.expires_at <= now.toISOString())
      throw new DomainError('unauthenticated', 'challenge_expired', 'The challenge has expired (they last 5 minutes); sign in again.');
    return row;
  }

  /**
   * Spends `previous` and issues the challenge a code is checked against. Wrong attempts carry
   * over, so asking for a new code does not reset the limit.
   */
  async renew(previous: Challenge, provider: SecondFactorProvider, code: string | null, now = new Date()): Promise<string> {
    const challenge = randomToken();
    const idHash = digest(challenge);
    await this.db.transaction().execute(async (trx) => {
      const spent = await trx
        .updateTable('challenges')
        .set({ used_at: now.toISOString() })
        .where('id_hash', '=', previous.id_hash)
        .where('used_at', 'is', null)
        .executeTakeFirst();
      if (Number(spent.numUpdatedRows) !== 1) throw usedChallenge();
      await trx
        .insertInto('challenges')
        .values({
          id_hash: idHash,
          user_id: previous.user_id,
          stage: 'code',
          provider,
          code_hash: code === null ? null : codeDigest(idHash, code),
          attempts: previous.attempts,
          expires_at: new Date(now.getTime() + CHALLENGE_TTL_MS).toISOString(),
          used_at: null,
        })
        .execute();
    });
    return challenge;
  }

  /**
   * Counts one attempt before the code is compared, so parallel guesses cannot exceed the limit.
   * Returns how many attempts are left after this one; throws 429 once none are.
   */
  async countAttempt(row: Challenge): Promise<number> {
    const counted = await this.db
      .updateTable('challenges')
      .set((eb) => ({ attempts: eb('attempts', '+', 1) }))
      .where('id_hash', '=', row.id_hash)
      .where('attempts', '<', MAX_CODE_ATTEMPTS)
      .executeTakeFirst();
    if (Number(counted.numUpdatedRows) !== 1) throw burnedChallenge();
    const after = await this.db.selectFrom('challenges').select('attempts').where('id_hash', '=', row.id_hash).executeTakeFirstOrThrow();
    return MAX_CODE_ATTEMPTS - after.attempts;
  }

  /** Spends a challenge whose code was accepted; a concurrent use of the same challenge loses. */
  async spend(row: Challenge, now = new Date()): Promise<void> {
    const spent = await this.db
      .updateTable('challenges')
      .set({ used_at: now.toISOString() })
      .where('id_hash', '=', row.id_hash)
      .where('used_at', 'is', null)
      .executeTakeFirst();
    if (Number(spent.numUpdatedRows) !== 1) throw usedChallenge();
  }
}

/** The stored form of an emailed code: bound to its challenge, so equal codes hash differently. */
function codeDigest(challengeHash: string, code: string): string {
  return digest(`${challengeHash}:${code}`);
}

/** Whether `code` is the one issued with this challenge (constant time). */
export function codeMatches(row: Challenge, code: string): boolean {
  if (!row.code_hash) return false;
  const expected = Buffer.from(row.code_hash, 'hex');
  const actual = Buffer.from(codeDigest(row.id_hash, code), 'hex');
  return expected.length === actual.length && crypto.timingSafeEqual(expected, actual);
}
