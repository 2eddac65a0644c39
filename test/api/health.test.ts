import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

describe('GET /api/v2/health', () => {
  it('answers 200 without authentication, uncached, and says nothing secret', async () => {
    const r = await t.api('GET', '/api/v2/health');
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.body).toEqual({ ok: true, broker_id: null, reasons: [], checks: { database: 'ok', cluster: 'off' } });
  });

  it('a bad token or stray query changes nothing; other methods answer 405 with Allow', async () => {
    const r = await t.api('GET', '/api/v2/health?verbose=1&x=' + 'a'.repeat(5000), { token: 'not-a-token' });
    expect(r.status).toBe(200);
    expect(r.body.ok).toBe(true);
    const post = await t.api('POST', '/api/v2/health', { body: { ok: false } });
    expect(post.status).toBe(405);
    expect(post.body).toMatchObject({ code: 405, error: 'method_not_allowed' });
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect((await t.api('GET', '/api/v2/health')).status).toBe(200);
  });

  it('is listed in the OpenAPI document as public', async () => {
    const r = await t.api('GET', '/api/v2/openapi.json');
    expect(r.body.paths['/api/v2/health'].get).toBeDefined();
  });

  it('answers 503 not_ready (draining) from the moment a shutdown begins', async () => {
    const other = await startTestBroker();
    try {
      other.broker.services.health.drain();
      const r = await other.api('GET', '/api/v2/health');
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('5');
      expect(r.body).toMatchObject({ code: 503, error: 'not_ready', ok: false, reasons: ['draining'], checks: { database: 'ok' } });
      expect(r.body.message).toMatch(/draining/);
    } finally {
      await other.close();
    }
    // closeServices drains first: the running broker is still healthy, the closed one drained.
    expect(other.broker.services.health.isDraining).toBe(true);
    expect(t.broker.services.health.isDraining).toBe(false);
  });
});
