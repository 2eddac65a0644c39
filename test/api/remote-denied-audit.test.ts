import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

describe('remote-access attempts refused by the route permission are audited', () => {
  it('audits a reload by a user whose grants cover other devices only', async () => {
    const device = await t.addDevice({ tags: ['plant'] });
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:office'] }]);
    const r = await t.api('POST', `/api/v2/remote/reload/${device}`, { token: user.token, body: {} });
    expect(r.status).toBe(403);
    expect(r.body).toMatchObject({ code: 403, error: 'forbidden' });
    const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}&result=denied`, { token: t.adminToken });
    expect(audit.body.items).toHaveLength(1);
    expect(audit.body.items[0]).toMatchObject({ event: 'remote.reload.denied', action: 'reload', user_id: user.id, result: 'denied' });
  });

  it('audits a reload by a user holding no remote-access permission at all', async () => {
    const device = await t.addDevice();
    const user = await t.userWith([{ permission: 'device:read' }]);
    const r = await t.api('POST', `/api/v2/remote/reload/${device}`, { token: user.token, body: {} });
    expect(r.status).toBe(403);
    const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}&event=remote.reload`, { token: t.adminToken });
    expect(audit.body.items.map((e: { result: string }) => e.result)).toEqual(['denied']);
  });
});
