import crypto from 'node:crypto';
import http from 'node:http';
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

/** A qbee-v1 upgrade of /device/<id> with this Authorization header (none when undefined): the refusal's status. */
function qbeeUpgrade(device: string, authorization?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(`/device/${device}`, t.url), {
      headers: { Connection: 'upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Protocol': 'qbee-v1', ...(authorization ? { Authorization: authorization } : {}) },
    });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      reject(new Error('upgraded'));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('refused qbee-v1 upgrades are audited', () => {
  it('a missing and a bad token: denied entries with the device and the address, never the token', async () => {
    const device = await t.addDevice();
    expect(await qbeeUpgrade(device)).toBe(401);
    const forged = `forged-${crypto.randomBytes(8).toString('hex')}`;
    expect(await qbeeUpgrade(device, forged)).toBe(401);
    const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}`, { token: t.adminToken });
    expect(audit.body.items).toHaveLength(2);
    for (const entry of audit.body.items) {
      expect(entry).toMatchObject({ event: 'remote.qbee.denied', action: 'connect', result: 'denied', user_id: null, source: 'qbee', source_ip: '127.0.0.1' });
    }
    expect(audit.body.items.map((e: { reason: string }) => e.reason.split(':')[0]).sort()).toEqual(['invalid_token', 'unauthorized']);
    expect(JSON.stringify(audit.body)).not.toContain(forged);
  });
});
