import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import * as openapi from '../../broker/http/openapi.js';
import { routeTable } from '../../broker/routes.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let buildOpenApi: MockInstance<typeof openapi.buildOpenApi>;
beforeAll(async () => {
  buildOpenApi = vi.spyOn(openapi, 'buildOpenApi');
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

describe('broker basics', () => {
  it('signs in the first user from ADMIN_EMAIL/ADMIN_PASSWORD and refuses a wrong password', async () => {
    expect(t.adminToken).toMatch(/^ey/);
    const bad = await t.api('POST', '/api/v2/login', { body: { email: 'admin@example.com', password: 'nope-nope' } });
    expect(bad.status).toBe(401);
    expect(bad.body).toMatchObject({ code: 401, error: 'invalid_credentials' });
  });

  it("writes the tests' own users with the cheaper test hash, with which they sign in", async () => {
    const user = await t.userWith([{ permission: 'device:read' }]);
    const stored = await t.broker.services.store.db.selectFrom('users').select('password_hash').where('id', '=', user.id).executeTakeFirstOrThrow();
    expect(stored.password_hash).toMatch(/^scrypt\$1024\$8\$1\$/);
    expect(await t.login(user.email, user.password)).toMatch(/^ey/);
  });

  it('answers 401 in the contract shape without a token', async () => {
    const r = await t.api('GET', '/api/v2/commitlist');
    expect(r.status).toBe(401);
    expect(r.body).toMatchObject({ code: 401, error: 'unauthorized' });
  });

  it('rejects unknown body fields with 400 naming the field', async () => {
    const r = await t.api('POST', '/api/v2/login', { body: { email: 'a@b.c', password: 'x', extra: 1 } });
    expect(r.status).toBe(400);
    expect(r.body.error).toBe('invalid_request');
  });

  it('serves the OpenAPI document, built at its first request (not at start) and once', async () => {
    expect(buildOpenApi).not.toHaveBeenCalled();
    const r = await t.api('GET', '/api/v2/openapi.json');
    expect(r.status).toBe(200);
    expect(r.body.openapi).toBe('3.1.0');
    expect(r.body.paths['/api/v2/login'].post).toBeDefined();
    expect((await t.api('GET', '/api/v2/openapi.json')).body).toEqual(r.body);
    expect(buildOpenApi).toHaveBeenCalledTimes(1);
  });

  it('logout revokes the token', async () => {
    const token = await t.login('admin@example.com', 'admin-password-1');
    expect((await t.api('GET', '/api/v2/commitlist', { token })).status).toBe(200);
    expect((await t.api('POST', '/api/v2/logout', { token })).status).toBe(204);
    const after = await t.api('GET', '/api/v2/commitlist', { token });
    expect(after.status).toBe(401);
    expect(after.body.error).toBe('token_revoked');
  });

  it('builds every call of the specification: none answers 501 not_implemented', async () => {
    const unbuilt = routeTable().filter((r) => r.notImplemented);
    expect(unbuilt.map((r) => `${r.method.toUpperCase()} ${r.path}`)).toEqual([]);
  });
});

describe('API sandbox', () => {
  it('serves Swagger UI on the OpenAPI document, with the WebSocket endpoints documented', async () => {
    const page = await t.api('GET', '/api/sandbox');
    expect(page.status).toBe(200);
    expect(page.body).toContain('swagger-ui-bundle.js');
    const init = await t.api('GET', '/api/sandbox/init.js');
    expect(init.body).toContain('/api/v2/openapi.json');
    const bundle = await fetch(`${t.url}/api/sandbox/assets/swagger-ui-bundle.js`);
    expect(bundle.status).toBe(200);
    expect((await bundle.text()).length).toBeGreaterThan(100_000);
    const doc = await t.api('GET', '/api/v2/openapi.json');
    expect(doc.body.components.securitySchemes.authorization).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(Object.keys(doc.body.paths)).toEqual(expect.arrayContaining(['/api/v2/remote/console', '/api/v2/agent/ws', '/api/v2/agent/enrol']));
  });
});
