/**
 * Text that UTF-8 cannot hold as sent — a lone UTF-16 surrogate, which both databases store as
 * U+FFFD — and NUL, which PostgreSQL's text refuses: a request holding either is answered 400
 * (CONTRACT.md) and changes nothing, and whatever reaches the audit trail is hashed as it is stored,
 * so `audit/verify` still finds the chain intact, on SQLite and PostgreSQL alike.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let device: string;
beforeAll(async () => {
  t = await startTestBroker();
  device = await t.addDevice({ name: 'plain' });
});
afterAll(async () => {
  await t?.close();
});

async function verified() {
  const r = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body;
}

describe('lone surrogates and NUL', () => {
  it('a body holding a lone surrogate, as a value or a key, is refused with 400 and changes nothing; the chain stays intact', async () => {
    const bodies = [{ device_name: 'a\ud800b' }, { description: 'tail\udc00' }, { custom: { 'key\ud83d': 'v' } }, { custom: { k: '\udfff' } }];
    for (const body of bodies) {
      const r = await t.api('PATCH', `/api/v2/deviceattribute/${device}`, { token: t.adminToken, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body).toMatchObject({ code: 400, error: expect.any(String), message: expect.stringMatching(/surrogate/) });
    }
    const after = await t.api('GET', `/api/v2/deviceattribute/${device}`, { token: t.adminToken });
    expect(after.body.device_name).toBe('plain');
    expect(after.body.custom ?? {}).toEqual({});
    // A pair is one character, and is kept.
    const pair = await t.api('PATCH', `/api/v2/deviceattribute/${device}`, { token: t.adminToken, body: { description: 'rocket \ud83d\ude80' } });
    expect(pair.status).toBe(200);
    expect(pair.body.description).toBe('rocket 🚀');
    expect(await verified()).toMatchObject({ ok: true });
  });

  it('an entry whose text holds a lone surrogate or NUL is written as stored, and verifies', async () => {
    const audit = t.broker.services.audit;
    await audit.recordChange({ event: 'test.unicode', action: 'cut \ud83d', deviceId: `dev\udc00`, options: { path: 'a\ud800' }, ip: '127.0.0.1' });
    await audit.recordChange({ event: 'test.unicode', action: 'nul \u0000 here', options: {}, ip: '127.0.0.1', result: 'error', reason: 'bad \u0000 \ud800' });
    // Cut in the middle of a pair by the length bound on an entry's device id.
    await audit.recordChange({ event: 'test.unicode', action: 'bounded', deviceId: `${'x'.repeat(99)}🚀`, options: {}, ip: '127.0.0.1' });
    expect(await verified()).toMatchObject({ ok: true });
    const list = await t.api('GET', '/api/v2/commitlist?event=test.unicode&items_per_page=10', { token: t.adminToken });
    expect(list.body.items).toHaveLength(3);
    expect(list.body.items.map((e: { action: string }) => e.action)).toEqual(['bounded', 'nul \ufffd here', 'cut \ufffd']);
  });

  it('NUL in a refused field: 400, not 500, and the refusal verifies', async () => {
    const r = await t.api('PATCH', `/api/v2/deviceattribute/${device}`, { token: t.adminToken, body: { custom: { 'nul\u0000': 'v' } } });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 400, error: expect.any(String) });
    // The refusal is an entry (on PostgreSQL too, whose text refuses NUL), and the chain verifies.
    const list = await t.api('GET', `/api/v2/commitlist?device_id=${device}&result=error&items_per_page=100`, { token: t.adminToken });
    expect(list.body.items.some((e: { options: unknown }) => JSON.stringify(e.options).includes('nul\\u0000'))).toBe(true);
    expect(await verified()).toMatchObject({ ok: true });
  });
});
