/**
 * Sessions started and tokens issued are audit entries: a sign-in with a password, a token renewal
 * (refresh cookie or bearer) and a command-line sign-in collected with its device code. None of them
 * records a token or a password.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

async function entriesOf(userId: string, event: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?user_id=${userId}&event=${event}&items_per_page=100`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

const refreshCookie = (r: { headers: Headers }) =>
  r.headers
    .getSetCookie()
    .map((c) => /^fleet_refresh=([^;]+)/.exec(c)?.[1])
    .find(Boolean) as string;

describe('issued tokens are audited', () => {
  it('a sign-in with a password: an entry of the user, with address and program, without the password or the token', async () => {
    const user = await t.userWith([]);
    const r = await t.api('POST', '/api/v2/login', { body: { email: user.email, password: user.password }, headers: { 'user-agent': 'audit-test/1' } });
    expect(r.status).toBe(200);
    const logins = await entriesOf(user.id, 'session.login');
    // userWith signed in once too.
    expect(logins).toHaveLength(2);
    expect(logins[0]).toMatchObject({
      event: 'session.login',
      result: 'ok',
      user_email: user.email,
      source_ip: '127.0.0.1',
      action: 'POST /api/v2/login',
      options: { method: 'password', user_agent: 'audit-test/1' },
    });
    expect(logins[0].session_id).toEqual(expect.any(String));
    const text = JSON.stringify(logins);
    expect(text).not.toContain(user.password);
    expect(text).not.toContain(r.body.token);
    expect(text).not.toContain(refreshCookie(r));
  });

  it('a renewal with the refresh cookie and with a bearer token: entries of the user, without either token', async () => {
    const user = await t.userWith([]);
    const signIn = await t.api('POST', '/api/v2/login', { body: { email: user.email, password: user.password } });
    const cookie = refreshCookie(signIn);
    const byCookie = await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie: `fleet_refresh=${cookie}` } });
    expect(byCookie.status).toBe(200);
    const byBearer = await t.api('POST', '/api/v2/refresh-jwt', { token: signIn.body.token });
    expect(byBearer.status).toBe(200);
    const renewals = await entriesOf(user.id, 'session.refresh');
    expect(renewals.map((e) => e.options.with)).toEqual(['bearer', 'refresh_cookie']);
    expect(renewals[0]).toMatchObject({ result: 'ok', action: 'POST /api/v2/refresh-jwt', user_email: user.email });
    const text = JSON.stringify(renewals);
    for (const secret of [cookie, signIn.body.token, byCookie.body.token, byBearer.body.token]) expect(text).not.toContain(secret);
  });

  it('a command-line sign-in collected with its device code: an entry of the approving user, without the codes or tokens', async () => {
    const user = await t.userWith([]);
    const form = { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'fleet-cli/test' };
    const started = await t.api('POST', '/oauth2/devicecode', { headers: form });
    expect(started.status).toBe(200);
    expect((await t.api('GET', `/api/v2/oauth2/device-auth/${started.body.user_code}`, { token: user.token })).status).toBe(200);
    expect((await t.api('POST', `/api/v2/oauth2/device-auth/${started.body.user_code}`, { token: user.token, body: {} })).status).toBe(200);
    const collected = await t.api('POST', '/oauth2/token', {
      headers: form,
      body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: started.body.device_code }).toString(),
    });
    expect(collected.status).toBe(200);
    const [entry] = await entriesOf(user.id, 'session.device_code');
    expect(entry).toMatchObject({
      result: 'ok',
      action: 'POST /oauth2/token',
      user_email: user.email,
      options: { method: 'device_code', user_agent: 'fleet-cli/test' },
    });
    const text = JSON.stringify(entry);
    for (const secret of [started.body.device_code, collected.body.access_token, collected.body.refresh_token]) expect(text).not.toContain(secret);
  });
});
