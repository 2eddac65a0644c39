/**
 * A pending command-line sign-in code is the business of the signed-in user who enters it: another
 * user can neither read where it came from nor decline (or approve) it, and cannot tell it from a
 * code that does not exist. Guessing codes is rate-limited.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEVICE_CODE_LOOKUPS_PER_USER } from '../../broker/auth/device-auth.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

const form = { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'fleet-cli/claims' };
const start = async () => (await t.api('POST', '/oauth2/devicecode', { headers: form })).body as { device_code: string; user_code: string };
const poll = (deviceCode: string) =>
  t.api('POST', '/oauth2/token', {
    headers: form,
    body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: deviceCode }).toString(),
  });

/** A code of the right form that no one was issued (one in 2.6·10^10 to clash). */
const UNKNOWN = 'ZZZZ-ZZZX';

describe('a pending device code belongs to the user who enters it', () => {
  it('another user cannot look it up, decline or approve it, and gets the answer of an unknown code', async () => {
    const owner = await t.userWith([]);
    const intruder = await t.userWith([]);
    const code = await start();
    const seen = await t.api('GET', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: owner.token });
    expect(seen.status).toBe(200);
    expect(seen.body).toMatchObject({ user_code: code.user_code, user_agent: 'fleet-cli/claims' });

    const unknown = await t.api('GET', `/api/v2/oauth2/device-auth/${UNKNOWN}`, { token: intruder.token });
    expect(unknown.status).toBe(404);
    const peek = await t.api('GET', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: intruder.token });
    expect(peek.status).toBe(404);
    expect(peek.body).toEqual(unknown.body);
    expect(JSON.stringify(peek.body)).not.toContain('fleet-cli/claims');
    const decline = await t.api('DELETE', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: intruder.token });
    expect(decline.status).toBe(404);
    expect(decline.body).toEqual((await t.api('DELETE', `/api/v2/oauth2/device-auth/${UNKNOWN}`, { token: intruder.token })).body);
    expect((await t.api('POST', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: intruder.token, body: {} })).status).toBe(404);

    // Still pending, still the owner's to approve: the client gets a session of the owner.
    expect((await poll(code.device_code)).body.error).toBe('authorization_pending');
    expect((await t.api('POST', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: owner.token, body: {} })).status).toBe(200);
    const collected = await poll(code.device_code);
    expect(collected.status).toBe(200);
    expect((await t.api('GET', '/api/v2/profile', { token: collected.body.access_token })).body.user_id).toBe(owner.id);
  });

  it('a code approved straight away (no look-up first) is claimed by the approver; another user then cannot decline it', async () => {
    const owner = await t.userWith([]);
    const intruder = await t.userWith([]);
    const code = await start();
    expect((await t.api('DELETE', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: owner.token })).status).toBe(200);
    expect((await t.api('DELETE', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: intruder.token })).status).toBe(404);
    expect((await poll(code.device_code)).body.error).toBe('authorization_declined');
  });

  it('guessing codes is rate-limited per user', async () => {
    const guesser = await t.userWith([]);
    for (let i = 0; i < DEVICE_CODE_LOOKUPS_PER_USER; i += 1) {
      expect((await t.api('GET', `/api/v2/oauth2/device-auth/${UNKNOWN}`, { token: guesser.token })).status).toBe(404);
    }
    const limited = await t.api('GET', `/api/v2/oauth2/device-auth/${UNKNOWN}`, { token: guesser.token });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/);
    // The limit is the guesser's: another user still enters their code.
    const other = await t.userWith([]);
    const code = await start();
    expect((await t.api('GET', `/api/v2/oauth2/device-auth/${code.user_code}`, { token: other.token })).status).toBe(200);
  });
});
