/** Shared by the auth*.test.ts files: error-shape checks, cookies, users straight in the store. */
import crypto from 'node:crypto';
import { expect } from 'vitest';
import { testPasswordHash, type ApiAnswer, type TestBroker } from '../support/broker.js';

/** Every failure answers `{code, error, message}` with `code` equal to the HTTP status. */
export function expectError(r: ApiAnswer, status: number, error: string): void {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.body).toMatchObject({ code: status, error });
  expect(typeof r.body.message).toBe('string');
  expect(r.body.message.length).toBeGreaterThan(0);
}

/** `name=value` of a cookie set by the answer. */
export function setCookie(r: ApiAnswer, name: string): { pair: string; attributes: string } | undefined {
  const line = r.headers.getSetCookie().find((c) => c.startsWith(`${name}=`));
  if (!line) return undefined;
  const [pair, ...attributes] = line.split(';');
  return { pair: pair.trim(), attributes: attributes.join(';') };
}

export const REFRESH_COOKIE = 'fleet_refresh';

/** A user straight in the store, optionally without a password or with a 2FA override. */
export async function insertUser(
  t: TestBroker,
  o: { email?: string; password?: string | null; twoFactor?: number | null; fname?: string; roleId?: string } = {},
): Promise<{ id: string; email: string; password: string | null }> {
  const db = t.broker.services.store.db;
  const id = crypto.randomUUID();
  const email = o.email ?? `u-${id.slice(0, 8)}@example.com`;
  const password = o.password === undefined ? `pw-${id.slice(0, 10)}` : o.password;
  await db
    .insertInto('users')
    .values({
      id,
      email,
      fname: o.fname ?? 'Ada',
      lname: 'Tester',
      password_hash: password === null ? null : await testPasswordHash(password),
      disabled: 0,
      two_factor: o.twoFactor ?? null,
      totp_secret: null,
      totp_pending: null,
      created_at: new Date().toISOString(),
      last_login: null,
    })
    .execute();
  if (o.roleId) await db.insertInto('user_roles').values({ user_id: id, role_id: o.roleId }).execute();
  return { id, email, password };
}

export async function setUserColumns(t: TestBroker, id: string, values: { two_factor?: number | null; disabled?: number }): Promise<void> {
  await t.broker.services.store.db.updateTable('users').set(values).where('id', '=', id).execute();
  t.broker.services.epoch.bump(); // written behind the API's back: tell the caches
}
