import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let companyId: string;
let reader: string; // company:read
let manager: string; // company:read + company:manage, no users:manage

beforeAll(async () => {
  t = await startTestBroker();
  reader = await t.tokenWith([{ permission: 'company:read' }]);
  manager = await t.tokenWith([{ permission: 'company:read' }, { permission: 'company:manage' }]);
  companyId = (await t.api('GET', '/api/v2/company', { token: t.adminToken })).body.id;
});
afterAll(async () => {
  await t?.close();
});

async function auditEntries() {
  return t.broker.services.store.db.selectFrom('audit').selectAll().where('event', '=', 'company.update').orderBy('id').execute();
}

describe('company', () => {
  it('has one record per installation with a stable id, made by the migration', async () => {
    const r = await t.api('GET', `/api/v2/company/${companyId}`, { token: reader });
    expect(r.status).toBe(200);
    expect(companyId).toMatch(/^[0-9a-f-]{36}$/);
    expect(r.body).toMatchObject({ id: companyId, company_id: companyId, name: '', settings: { two_factor_required: false, agent_interval: 5 } });
    expect((await t.api('GET', '/api/v2/company', { token: reader })).body.id).toBe(companyId);
  });

  it('answers 404 for another company id and 403 without company:read', async () => {
    const r = await t.api('GET', '/api/v2/company/00000000-0000-0000-0000-000000000000', { token: reader });
    expect(r.status).toBe(404);
    expect(r.body).toMatchObject({ code: 404, error: 'not_found' });
    expect((await t.api('PATCH', '/api/v2/company/nope', { token: manager, body: { city: 'Oslo' } })).status).toBe(404);
    const nobody = await t.tokenWith([{ permission: 'device:read' }]);
    expect((await t.api('GET', `/api/v2/company/${companyId}`, { token: nobody })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/company', { token: nobody })).status).toBe(403);
  });

  it('changes the given fields with PATCH and audits what changed', async () => {
    const earlier = (await auditEntries()).length;
    const r = await t.api('PATCH', `/api/v2/company/${companyId}`, {
      token: manager,
      body: { name: 'Acme Fleet AS', city: 'Oslo', contact_email: 'ops@acme.example', settings: { agent_interval: 15 } },
    });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      name: 'Acme Fleet AS',
      city: 'Oslo',
      contact_email: 'ops@acme.example',
      settings: { agent_interval: 15, two_factor_required: false },
    });
    const entries = (await auditEntries()).slice(earlier);
    expect(entries).toHaveLength(1);
    const options = JSON.parse(entries[0].options);
    expect(options.before).toMatchObject({ name: '', city: '' });
    expect(options.after).toMatchObject({ name: 'Acme Fleet AS', city: 'Oslo', agent_interval: 15 });
  });

  it('replaces the record with PUT: fields left out become empty, settings stay', async () => {
    const r = await t.api('PUT', `/api/v2/company/${companyId}`, { token: manager, body: { name: 'Acme', country: 'Norway' } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ name: 'Acme', country: 'Norway', city: '', contact_email: '', settings: { agent_interval: 15 } });
    expect((await t.api('PUT', `/api/v2/company/${companyId}`, { token: manager, body: { country: 'Norway' } })).status).toBe(400);
  });

  it('refuses bad input and changes nothing', async () => {
    const before = (await t.api('GET', `/api/v2/company/${companyId}`, { token: reader })).body;
    for (const body of [
      { name: 'x', colour: 'red' },
      { contact_email: 'not-an-email' },
      { name: 'a'.repeat(201) },
      { name: 'line\nbreak' },
      { name: '   ' },
      { settings: { agent_interval: 0 } },
      { settings: { agent_interval: 5, surprise: true } },
      { settings: { two_factor_required: 'yes' } },
    ]) {
      const r = await t.api('PATCH', `/api/v2/company/${companyId}`, { token: manager, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body).toMatchObject({ code: 400 });
    }
    expect((await t.api('GET', `/api/v2/company/${companyId}`, { token: reader })).body).toEqual(before);
  });

  it('refuses changes without company:manage', async () => {
    expect((await t.api('PATCH', `/api/v2/company/${companyId}`, { token: reader, body: { name: 'Mine' } })).status).toBe(403);
    expect((await t.api('PUT', `/api/v2/company/${companyId}`, { token: reader, body: { name: 'Mine' } })).status).toBe(403);
  });

  it('carries the second-factor policy sign-in enforces; changing it needs users:manage too', async () => {
    const denied = await t.api('PATCH', `/api/v2/company/${companyId}`, { token: manager, body: { city: 'Bergen', settings: { two_factor_required: true } } });
    expect(denied.status).toBe(403);
    const after = (await t.api('GET', `/api/v2/company/${companyId}`, { token: reader })).body;
    expect(after.city).toBe('');
    expect(after.settings.two_factor_required).toBe(false);
    // The same value as now is no change, and needs nothing more.
    expect((await t.api('PATCH', `/api/v2/company/${companyId}`, { token: manager, body: { settings: { two_factor_required: false } } })).status).toBe(200);

    const on = await t.api('PATCH', `/api/v2/company/${companyId}`, { token: t.adminToken, body: { settings: { two_factor_required: true } } });
    expect(on.status).toBe(200);
    expect(on.body.settings.two_factor_required).toBe(true);
    expect((await t.api('GET', '/api/v2/settings/two-factor', { token: t.adminToken })).body).toEqual({ enabled: true });
    // Sign-in now asks a user without an override for a second factor.
    const login = await t.api('POST', '/api/v2/login', { body: ADMIN });
    expect(login.status).toBe(401);
    expect(login.body.error).toBe('2fa_required');
    const off = await t.api('PATCH', `/api/v2/company/${companyId}`, { token: t.adminToken, body: { settings: { two_factor_required: false } } });
    expect(off.body.settings.two_factor_required).toBe(false);
    const entry = (await auditEntries()).at(-1)!;
    expect(JSON.parse(entry.options).after).toMatchObject({ two_factor_required: false });
  });
});
