import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { UserList, UserRecord, WelcomeMailDelivery } from '../../shared/api-types.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import { hashPassword } from '../auth/passwords.js';
import type { AuthService } from '../auth/service.js';
import { twoFactorState } from '../auth/two-factor.js';
import type { Config } from '../environment.js';
import type { Store } from '../db/database.js';
import { conflict, DomainError, invalid, notFound } from '../errors.js';
import { RECORDING_RANK, recordingModeOf } from '../access/recording.js';
import { removeSignInRows } from '../auth/user-rows.js';
import { builtinRoleIds, consoleRolesOf, existingRoleIds, policiesOfRoles } from '../roles/store.js';
import { findUser, rolesOfUsers } from './directory.js';
import { writeIdentity } from '../roles/identity.js';
import {
  countActiveHolders,
  countActiveUsers,
  deleteUser,
  emailTaken,
  insertUser,
  listUsers,
  setUserRoles,
  updateUser,
  usersFollowingTwoFactorPolicy,
  type Executor,
  type UserRow,
} from './store.js';

export interface NewUser {
  fname: string;
  lname: string;
  email: string;
  roles: string[];
  password?: string;
  two_factor?: { enabled: boolean };
}

/** Fields of a change; left-out fields stay as they are. `two_factor.enabled: null` follows the account policy again. */
export interface UserChanges {
  fname?: string;
  lname?: string;
  email?: string;
  roles?: string[];
  disabled?: boolean;
  two_factor?: { enabled: boolean | null };
  /** Never set through a change: refused (see `update`). */
  password?: string;
}

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

const unique = (values: string[]) => [...new Set(values)];

/**
 * Users of the account: their records, roles, the enabled/disabled state and the subscription's
 * seats. Every change runs in one transaction under the identity lock, so the checks that keep the
 * account usable (a seat for each active user, an active Administrator left) hold when it commits.
 */
export class UsersService {
  constructor(
    private readonly store: Pick<Store, 'db' | 'dialect'>,
    private readonly config: Pick<Config, 'seats'>,
    private readonly logger: Logger,
    /** the account's 2FA policy, welcome mails, and ending a user's sign-in sessions */
    private readonly auth: Pick<AuthService, 'twoFactorPolicy' | 'sendWelcomeMail' | 'revokeUserSessions' | 'issueResetLink' | 'setTwoFactorPolicy'>,
    private readonly access: Pick<AccessService, 'requireGrantable' | 'requireOutranks'>,
  ) {}

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  private get db(): Executor {
    return this.store.db;
  }

  private twoFactorDefault(): Promise<boolean> {
    return this.auth.twoFactorPolicy();
  }

  private toRecord(row: UserRow, roles: string[], twoFactorDefault: boolean): UserRecord {
    return {
      user_id: row.id,
      fname: row.fname,
      lname: row.lname,
      email: row.email,
      roles,
      disabled: row.disabled === 1,
      two_factor: twoFactorState(row, twoFactorDefault),
      created_at: row.created_at,
      last_login: row.last_login,
    };
  }

  /** The user's record; 404 when there is none. */
  async get(userId: string): Promise<UserRecord> {
    const row = await findUser(this.db, userId);
    if (!row) throw notFound(`User ${userId}`);
    const roles = await rolesOfUsers(this.db, [row.id]);
    return this.toRecord(row, roles.get(row.id) ?? [], await this.twoFactorDefault());
  }

  async list(q: { offset: number; items_per_page: number; search?: string }): Promise<UserList> {
    const { total, rows } = await listUsers(this.db, { offset: q.offset, limit: q.items_per_page, search: q.search?.trim() || undefined });
    const roles = await rolesOfUsers(
      this.db,
      rows.map((r) => r.id),
    );
    const twoFactorDefault = await this.twoFactorDefault();
    return {
      items: rows.map((r) => this.toRecord(r, roles.get(r.id) ?? [], twoFactorDefault)),
      total,
      seats: await this.seats(),
    };
  }

  /** Seats in use (active users) and the subscription's maximum. */
  async seats(db: Executor = this.db): Promise<{ used: number; max: number }> {
    return { used: await countActiveUsers(db), max: this.config.seats };
  }

  /**
   * Creates an active user and sends the welcome mail. Without a password the user sets one through
   * the mail's link before signing in; with one (an API user for scripts) they can sign in at once.
   */
  async create(actor: Principal, input: NewUser): Promise<UserRecord & { welcome_mail: WelcomeMailDelivery }> {
    const email = normalizeEmail(input.email);
    const roles = unique(input.roles);
    const passwordHash = input.password !== undefined ? await hashPassword(input.password) : null;
    const id = crypto.randomUUID();
    await this.write(async (trx) => {
      await this.requireRoles(trx, roles);
      this.access.requireGrantable(actor, await policiesOfRoles(trx, roles));
      if (await emailTaken(trx, email)) throw duplicateEmail(email);
      await this.requireSeat(trx);
      await insertUser(
        trx,
        {
          id,
          email,
          fname: input.fname,
          lname: input.lname,
          password_hash: passwordHash,
          disabled: 0,
          two_factor: input.two_factor === undefined ? null : input.two_factor.enabled ? 1 : 0,
          totp_secret: null,
          totp_pending: null,
          created_at: new Date().toISOString(),
          last_login: null,
        },
        roles,
      );
    });
    let welcome: WelcomeMailDelivery;
    try {
      welcome = await this.auth.sendWelcomeMail({ id, email, fname: input.fname, lname: input.lname }, { hasPassword: passwordHash !== null });
    } catch (err) {
      // The user exists either way; an administrator can send a new link once mail works again.
      this.logger.error({ err, userId: id, by: actor.user.id }, 'welcome mail could not be sent');
      welcome = 'failed';
    }
    // The answer says where the mail went, so the console does not claim a mail was sent when it sits in the outbox.
    return { ...(await this.get(id)), welcome_mail: welcome };
  }

  /** PUT: replaces name, email and roles; `disabled` and `two_factor` change only when given. */
  async replace(
    actor: Principal,
    userId: string,
    input: Required<Pick<UserChanges, 'fname' | 'lname' | 'email' | 'roles'>> & UserChanges,
  ): Promise<UserRecord> {
    return this.update(actor, userId, input);
  }

  /**
   * PATCH: changes the given fields. Disabling revokes the user's tokens at once; re-enabling needs a
   * free seat. Changing what guards someone's sign-in (email, second factor, enabled state) or taking
   * roles away needs the actor to hold everything the user holds (see `requireOutranks`). Passwords
   * are not set here: the user sets their own (profile), an administrator sends a reset link.
   */
  async update(actor: Principal, userId: string, changes: UserChanges): Promise<UserRecord> {
    const email = changes.email !== undefined ? normalizeEmail(changes.email) : undefined;
    const roles = changes.roles !== undefined ? unique(changes.roles) : undefined;
    let endSessions = false;
    await this.write(async (trx) => {
      const user = await findUser(trx, userId);
      if (!user) throw notFound(`User ${userId}`);
      const currentRoles = (await rolesOfUsers(trx, [userId])).get(userId) ?? [];
      const guarded = guardedChanges(user, currentRoles, { ...changes, email, roles });
      if (guarded.length > 0) {
        this.access.requireOutranks(actor, await policiesOfRoles(trx, currentRoles), `You cannot change the ${guarded.join(' and ')} of ${user.email}`);
      }
      if (changes.password !== undefined) throw passwordNotSettable();
      if (roles) {
        await this.requireRoles(trx, roles);
        this.access.requireGrantable(
          actor,
          await policiesOfRoles(
            trx,
            roles.filter((r) => !currentRoles.includes(r)),
          ),
        );
      }
      if (email !== undefined && email !== user.email && (await emailTaken(trx, email, userId))) throw duplicateEmail(email);
      const wasActive = user.disabled === 0;
      const willBeActive = changes.disabled === undefined ? wasActive : !changes.disabled;
      if (wasActive && !willBeActive && userId === actor.user.id) {
        throw conflict('self_lockout', 'You cannot disable your own user; ask another administrator.', { field: 'disabled' });
      }
      if (!wasActive && willBeActive) await this.requireSeat(trx);
      await this.requireAdministratorLeft(trx, userId, { active: wasActive, roles: currentRoles }, { active: willBeActive, roles: roles ?? currentRoles });
      await updateUser(trx, userId, {
        ...(changes.fname !== undefined ? { fname: changes.fname } : {}),
        ...(changes.lname !== undefined ? { lname: changes.lname } : {}),
        ...(email !== undefined ? { email } : {}),
        ...(changes.disabled !== undefined ? { disabled: changes.disabled ? 1 : 0 } : {}),
        ...(changes.two_factor !== undefined ? { two_factor: changes.two_factor.enabled === null ? null : changes.two_factor.enabled ? 1 : 0 } : {}),
      });
      if (roles && userId === actor.user.id) await requireOwnRecordingKept(trx, currentRoles, roles);
      if (roles) await setUserRoles(trx, userId, roles);
      endSessions = !willBeActive;
    });
    if (endSessions) await this.auth.revokeUserSessions(userId);
    return this.get(userId);
  }

  /** Removes a user at once, with their sessions: their tokens stop working on the next call. */
  async remove(actor: Principal, userId: string): Promise<void> {
    await this.write(async (trx) => {
      const user = await findUser(trx, userId);
      if (!user) throw notFound(`User ${userId}`);
      if (userId === actor.user.id) throw conflict('self_lockout', 'You cannot delete your own user; ask another administrator.');
      const roles = (await rolesOfUsers(trx, [userId])).get(userId) ?? [];
      this.access.requireOutranks(actor, await policiesOfRoles(trx, roles), `You cannot delete ${user.email}`);
      await this.requireAdministratorLeft(trx, userId, { active: user.disabled === 0, roles }, { active: false, roles: [] });
      await removeSignInRows(trx, userId);
      await deleteUser(trx, userId);
    });
  }

  /**
   * An administrator's password reset for a user: a link mailed to the address on record
   * (`sendEmail`), or returned to be handed over (shown once: only its hash is kept). Subject to the
   * same escalation rule as changing the user's email: a link is a way into the account.
   */
  async resetPassword(actor: Principal, userId: string, sendEmail: boolean): Promise<{ link: string; expires_at: string }> {
    const user = await findUser(this.db, userId);
    if (!user) throw notFound(`User ${userId}`);
    const roles = (await rolesOfUsers(this.db, [userId])).get(userId) ?? [];
    this.access.requireOutranks(actor, await policiesOfRoles(this.db, roles), `You cannot reset the password of ${user.email}`);
    const link = await this.auth.issueResetLink(user, sendEmail ? 'mail' : 'show');
    return { link: link.url, expires_at: link.expiresAt };
  }

  /**
   * The account-wide second-factor policy. Turning it off lowers the sign-in of every user who
   * follows it (no per-user override), so it needs every permission they hold, like changing their
   * own `two_factor`; turning it on is always allowed.
   */
  async setTwoFactorPolicy(actor: Principal, enabled: boolean): Promise<boolean> {
    if (!enabled) {
      const followers = await usersFollowingTwoFactorPolicy(this.db);
      const roles = [...new Set([...(await rolesOfUsers(this.db, followers)).values()].flat())];
      this.access.requireOutranks(actor, await policiesOfRoles(this.db, roles), 'You cannot turn off the second-factor policy for the users who follow it');
    }
    return this.auth.setTwoFactorPolicy(enabled);
  }

  /** One transaction under the identity lock; a unique-email race surfaces as 409. */
  private write(work: (trx: Executor) => Promise<void>): Promise<void> {
    return writeIdentity(this.db, this.store.dialect, work, () =>
      conflict('duplicate_email', 'A user with this email address exists already.', { field: 'email' }),
    );
  }

  private async requireRoles(trx: Executor, roles: string[]): Promise<void> {
    const found = await existingRoleIds(trx, roles);
    const missing = roles.filter((r) => !found.has(r));
    if (missing.length > 0) {
      throw invalid(`roles: no role with id ${missing.map((m) => `"${m}"`).join(', ')}; see GET /api/v2/roleslist.`, {
        field: 'roles',
        unknown_roles: missing,
      });
    }
  }

  private async requireSeat(trx: Executor): Promise<void> {
    const seats = await this.seats(trx);
    if (seats.used >= seats.max) {
      throw conflict('seats_exhausted', `All ${seats.max} seats of the subscription are taken by active users; disable or delete a user first.`, { seats });
    }
  }

  /** The account must keep an active user holding the built-in Administrator role. */
  private async requireAdministratorLeft(
    trx: Executor,
    userId: string,
    before: { active: boolean; roles: string[] },
    after: { active: boolean; roles: string[] },
  ): Promise<void> {
    const adminRoles = await builtinRoleIds(trx);
    const holds = (state: { active: boolean; roles: string[] }) => state.active && state.roles.some((r) => adminRoles.includes(r));
    if (!holds(before) || holds(after)) return;
    if ((await countActiveHolders(trx, adminRoles, userId)) > 0) return;
    throw conflict(
      'last_administrator',
      'This is the last active user with the built-in Administrator role; give the role to another active user first, so the account is not locked out.',
    );
  }
}

/**
 * The fields of a change that guard the user's sign-in or strip their roles, for the escalation
 * rule; a field sent with its current value (PUT of a record read back) changes nothing.
 */
function guardedChanges(user: UserRow, currentRoles: string[], changes: UserChanges): string[] {
  const guarded: string[] = [];
  if (changes.password !== undefined) guarded.push('password');
  if (changes.email !== undefined && changes.email !== user.email) guarded.push('email');
  if (changes.two_factor !== undefined) {
    const stored = changes.two_factor.enabled === null ? null : changes.two_factor.enabled ? 1 : 0;
    if (stored !== user.two_factor) guarded.push('two_factor');
  }
  if (changes.disabled !== undefined && changes.disabled !== (user.disabled === 1)) guarded.push('disabled');
  if (changes.roles !== undefined && currentRoles.some((r) => !changes.roles?.includes(r))) guarded.push('roles');
  return guarded;
}

function passwordNotSettable() {
  return invalid(
    'password: cannot be set on a user. Change your own with POST /api/v2/profile/password; for someone else, send a reset link with POST /api/v2/user/{user_id}/password-reset.',
    { field: 'password' },
    'password_not_settable',
  );
}

function duplicateEmail(email: string) {
  return conflict('duplicate_email', `A user with the email address ${email} exists already.`, { field: 'email' });
}

/**
 * Outranking oneself is trivial, so a user manager could lower the recording of their own consoles by
 * taking from themselves a role that grants remote-access:connect with a stricter recording than
 * another role they keep (the console then falls to the kept role's mode). Refused: another user
 * manager must do it. Decided role by role, as for a change to the role itself (roles/service.ts),
 * since which grants cover which console user is not known here.
 */
async function requireOwnRecordingKept(trx: Executor, before: string[], after: string[]): Promise<void> {
  const removed = before.filter((r) => !after.includes(r));
  if (removed.length === 0) return;
  const consoleRoles = await consoleRolesOf(trx, [...new Set([...before, ...after])]);
  const rank = (id: string) => RECORDING_RANK[recordingModeOf(consoleRoles.find((r) => r.id === id)?.recording)];
  const granting = new Set(consoleRoles.map((r) => r.id));
  const kept = after.filter((r) => granting.has(r));
  const lowered = removed.filter((r) => granting.has(r)).find((r) => kept.some((k) => rank(k) < rank(r)));
  if (lowered === undefined) return;
  throw new DomainError(
    'forbidden',
    'privilege_escalation',
    `Taking the role ${lowered} from yourself would lower the recording of your own consoles (another role of yours grants them with less); ask another user who may manage users.`,
  );
}
