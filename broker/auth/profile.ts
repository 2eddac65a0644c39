import type { Profile } from '../../shared/api-types.js';
import { consoleGrants } from '../../shared/resources.js';
import type { Principal } from '../access/principal.js';
import type { Db } from '../db/database.js';
import { conflict, invalid, notFound } from '../errors.js';
import { hashPassword, verifyPassword } from './passwords.js';
import type { UsersTable } from '../db/schema.js';
import type { PasswordLinks } from './password-links.js';
import type { RateLimiter } from './ratelimit.js';
import type { RecoveryCodes } from './recovery-codes.js';
import { newTotpSecret, totpEnrolment, totpStep, type TotpEnrolment } from './totp.js';
import { twoFactorState } from './two-factor.js';
import { confirmPendingTotp, rolesOfUsers, setOwnAccountFields, setPasswordHash } from '../users/directory.js';

type UserRow = UsersTable;

/** What the profile asks of sign-in (AuthService provides it): the user's row, the 2FA policy, limits, links, codes, sessions. */
export interface ProfileAuth {
  userRow(userId: string): Promise<UserRow | undefined>;
  twoFactorPolicy(): Promise<boolean>;
  acceptTotp(userId: string, secret: string, code: string): Promise<'ok' | 'invalid' | 'reused'>;
  revokeUserSessions(userId: string, exceptSessionId?: string): Promise<void>;
  readonly reauth: RateLimiter;
  readonly recoveryCodes: RecoveryCodes;
  readonly links: PasswordLinks;
}

const wrongPassword = (field: string) => invalid('The password is wrong.', { field }, 'wrong_password');

/** What any signed-in user may do to their own account: name, password, authenticator app. */
export class ProfileService {
  constructor(
    private readonly db: Db,
    private readonly auth: ProfileAuth,
  ) {}

  private async row(principal: Principal): Promise<UserRow> {
    const row = await this.auth.userRow(principal.user.id);
    if (!row) throw notFound('Your user');
    return row;
  }

  async get(principal: Principal): Promise<Profile> {
    const row = await this.row(principal);
    const roles = (await rolesOfUsers(this.db, [row.id])).get(row.id) ?? [];
    return {
      user_id: row.id,
      fname: row.fname,
      lname: row.lname,
      email: row.email,
      roles,
      disabled: row.disabled === 1,
      two_factor: twoFactorState(row, await this.auth.twoFactorPolicy()),
      created_at: row.created_at,
      last_login: row.last_login,
      permissions: principal.permissions,
      recovery_codes_left: await this.auth.recoveryCodes.left(row.id),
      console_grants: consoleGrants(principal.policies),
    };
  }

  async update(principal: Principal, change: { fname?: string; lname?: string }): Promise<Profile> {
    const set: { fname?: string; lname?: string } = {};
    if (change.fname !== undefined) set.fname = change.fname;
    if (change.lname !== undefined) set.lname = change.lname;
    await setOwnAccountFields(this.db, principal.user.id, set);
    return this.get(principal);
  }

  /** Needs the current password. The user's other sessions end; the calling one stays. */
  async changePassword(principal: Principal, currentPassword: string, newPassword: string): Promise<void> {
    const row = await this.row(principal);
    await this.auth.reauth.hit(`user:${row.id}`);
    if (!(await verifyPassword(currentPassword, row.password_hash))) throw wrongPassword('current_password');
    await this.auth.reauth.reset(`user:${row.id}`);
    const passwordHash = await hashPassword(newPassword);
    await this.db.transaction().execute(async (trx) => {
      await setPasswordHash(trx, row.id, passwordHash);
      await this.auth.links.spendAll(row.id, new Date(), trx);
    });
    await this.auth.revokeUserSessions(row.id, principal.sessionId);
  }

  /**
   * Starts setting up an authenticator app: a new secret, kept aside until a code of it is
   * confirmed. A second app replaces nothing: remove the current one first.
   */
  async startTotp(principal: Principal): Promise<TotpEnrolment> {
    const row = await this.row(principal);
    if (row.totp_secret) {
      throw conflict('totp_already_enabled', 'An authenticator app is already set up; remove it first (DELETE /api/v2/profile/totp).');
    }
    const secret = newTotpSecret();
    await setOwnAccountFields(this.db, row.id, { totp_pending: secret });
    return totpEnrolment(secret, row.email);
  }

  /**
   * Confirms the app with one of its codes; from then on `google` is a provider of the user and
   * sign-in asks for a second factor (`two_factor` on for this user): enrolling an app and then
   * signing in without it would leave the user believing the account is protected. Answers a new
   * set of recovery codes with the profile, the only time they are shown.
   */
  async confirmTotp(principal: Principal, code: string): Promise<Profile & { recovery_codes: string[] }> {
    const row = await this.row(principal);
    if (!row.totp_pending) throw conflict('totp_not_started', 'No authenticator setup is in progress; start one with POST /api/v2/profile/totp.');
    await this.auth.reauth.hit(`user:${row.id}`);
    const step = totpStep(row.totp_pending, code.trim());
    if (step === null)
      throw invalid('The code does not match; check the time of the device running the app and try the next code.', { field: 'code' }, 'invalid_code');
    await this.auth.reauth.reset(`user:${row.id}`);
    const pending = row.totp_pending;
    const codes = await this.db.transaction().execute(async (trx) => {
      if (!(await confirmPendingTotp(trx, row.id, pending, step)))
        throw conflict('totp_not_started', 'The authenticator setup changed meanwhile; start again.');
      return this.auth.recoveryCodes.issue(row.id, trx);
    });
    return { ...(await this.get(principal)), recovery_codes: codes };
  }

  /**
   * A new set of recovery codes, proven by a current code of the app or by the password (as removing
   * the app is): every earlier code stops working. Answers the codes, the only time they are shown.
   */
  async regenerateRecoveryCodes(principal: Principal, proof: { code?: string; password?: string }): Promise<Profile & { recovery_codes: string[] }> {
    const row = await this.row(principal);
    if (!row.totp_secret) throw conflict('totp_not_enabled', 'Recovery codes come with an authenticator app: set one up first.');
    await this.proveTotpOrPassword(row, row.totp_secret, proof);
    const codes = await this.db.transaction().execute((trx) => this.auth.recoveryCodes.issue(row.id, trx));
    return { ...(await this.get(principal)), recovery_codes: codes };
  }

  /** A current app code or the password, under the re-authentication limit (10 wrong in 15 min). */
  private async proveTotpOrPassword(row: UserRow, secret: string, proof: { code?: string; password?: string }): Promise<void> {
    await this.auth.reauth.hit(`user:${row.id}`);
    if (proof.code !== undefined) {
      const check = await this.auth.acceptTotp(row.id, secret, proof.code);
      if (check === 'reused') throw invalid('This code was already used; wait for the next one.', { field: 'code' }, 'code_already_used');
      if (check !== 'ok') throw invalid('The code does not match.', { field: 'code' }, 'invalid_code');
    } else if (!(await verifyPassword(proof.password ?? '', row.password_hash))) {
      throw wrongPassword('password');
    }
    await this.auth.reauth.reset(`user:${row.id}`);
  }

  /** Removes the authenticator app and its recovery codes, proven by one of its codes or by the password. */
  async removeTotp(principal: Principal, proof: { code?: string; password?: string }): Promise<Profile> {
    const row = await this.row(principal);
    if (!row.totp_secret) throw conflict('totp_not_enabled', 'No authenticator app is set up.');
    await this.proveTotpOrPassword(row, row.totp_secret, proof);
    await this.db.transaction().execute(async (trx) => {
      await setOwnAccountFields(trx, row.id, { totp_secret: null, totp_pending: null, totp_last_step: null });
      await this.auth.recoveryCodes.remove(row.id, trx);
    });
    return this.get(principal);
  }
}
