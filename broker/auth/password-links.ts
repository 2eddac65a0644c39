import type { Db } from '../db/database.js';
import { invalid } from '../errors.js';
import { setPasswordHash } from '../users/directory.js';
import { digest, hashPassword, randomToken } from './passwords.js';

export type PasswordLinkPurpose = 'welcome' | 'reset';

/** A new user has three days to set a password; a reset link lasts an hour. */
export const PASSWORD_LINK_TTL_MS: Record<PasswordLinkPurpose, number> = {
  welcome: 72 * 3_600_000,
  reset: 3_600_000,
};

const invalidLink = () => invalid('This password link is not valid; ask for a new one with "Forgot password".', { field: 'token' }, 'invalid_link');

/**
 * Single-use links to set a password: `<base>/set-password?token=<t>`. Only the token's sha256 is
 * stored. Setting a password through one link spends every other open link of the user.
 */
export class PasswordLinks {
  constructor(
    private readonly db: Db,
    /** where users reach the web console, without a trailing slash */
    private readonly baseUrl: string,
  ) {}

  /** Issues a link for the user; returns its URL and when it expires. */
  async issue(userId: string, purpose: PasswordLinkPurpose, now = new Date()): Promise<{ url: string; expiresAt: string }> {
    await this.db
      .deleteFrom('password_tokens')
      .where('expires_at', '<', new Date(now.getTime() - 30 * 86_400_000).toISOString())
      .execute();
    const token = randomToken();
    const expiresAt = new Date(now.getTime() + PASSWORD_LINK_TTL_MS[purpose]).toISOString();
    await this.db
      .insertInto('password_tokens')
      .values({
        token_hash: digest(token),
        user_id: userId,
        purpose,
        expires_at: expiresAt,
        used_at: null,
      })
      .execute();
    return { url: `${this.baseUrl}/set-password?token=${encodeURIComponent(token)}`, expiresAt };
  }

  /** Sets the password a link was issued for; returns the user. 400 naming `token` when the link cannot be used. */
  async redeem(token: string, password: string, now = new Date()): Promise<{ userId: string; email: string }> {
    const row = await this.db
      .selectFrom('password_tokens')
      .select(['token_hash', 'user_id', 'expires_at', 'used_at'])
      .where('token_hash', '=', digest(token))
      .executeTakeFirst();
    if (!row) throw invalidLink();
    if (row.used_at) throw invalid('This password link was already used; ask for a new one with "Forgot password".', { field: 'token' }, 'link_used');
    if (row.expires_at <= now.toISOString()) {
      throw invalid('This password link has expired; ask for a new one with "Forgot password".', { field: 'token' }, 'link_expired');
    }
    const passwordHash = await hashPassword(password);
    const email = await this.db.transaction().execute(async (trx) => {
      const spent = await trx
        .updateTable('password_tokens')
        .set({ used_at: now.toISOString() })
        .where('token_hash', '=', row.token_hash)
        .where('used_at', 'is', null)
        .executeTakeFirst();
      if (Number(spent.numUpdatedRows) !== 1) {
        throw invalid('This password link was already used; ask for a new one with "Forgot password".', { field: 'token' }, 'link_used');
      }
      // A link outlives no user (their links go with them), so a user not found is a link not valid.
      const email = await setPasswordHash(trx, row.user_id, passwordHash);
      if (email === undefined) throw invalidLink();
      await this.spendAll(row.user_id, now, trx);
      return email;
    });
    return { userId: row.user_id, email };
  }

  /** Spends every open link of a user (their password was set or changed another way). */
  async spendAll(userId: string, now = new Date(), db: Db = this.db): Promise<void> {
    await db.updateTable('password_tokens').set({ used_at: now.toISOString() }).where('user_id', '=', userId).where('used_at', 'is', null).execute();
  }
}
