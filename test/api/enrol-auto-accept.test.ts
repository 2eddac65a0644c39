/** Switching a bootstrap key from manual approval to auto-accept approves no host that waited under it. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enrolDevice } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let manager: { token: string };
let approver: { token: string };

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'lab', title: 'Lab' });
  manager = await t.userWith([{ permission: 'bootstrap-keys:manage' }, { permission: 'bootstrap-keys:read' }]);
  approver = await t.userWith([{ permission: 'device:approve' }]);
});
afterAll(async () => {
  await t?.close();
});

async function createKey(body: Record<string, unknown> = {}): Promise<string> {
  const r = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body });
  expect(r.status).toBe(200);
  return Object.keys(r.body)[0];
}

describe('switching a manual key to auto-accept', () => {
  it('leaves the hosts already pending under it pending, even when they enrol again; new devices are approved', async () => {
    const key = await createKey({ group_id: 'lab' });
    const { device } = await enrolDevice(t, key);
    const changed = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { auto_accept: true } });
    expect(changed.status).toBe(200);
    expect(changed.body.auto_accept).toBe(true);
    // The agent keeps enrolling while it waits: it is not approved by the switch.
    expect((await enrolDevice(t, key, device)).answer.body).toEqual({
      device_id: device.id,
      state: 'pending',
      broker_key: t.broker.services.brokerKey.publicKeyPem,
    });
    const pending = await t.api('GET', '/api/v2/pendinghost', { token: approver.token });
    expect(pending.body.some((h: { node_id: string }) => h.node_id === device.id)).toBe(true);
    expect((await t.api('GET', `/api/v2/node/${device.id}`, { token: t.adminToken })).status).toBe(404);
    // A device enrolling for the first time under the key now is approved at once.
    const fresh = await enrolDevice(t, key);
    expect(fresh.answer.body).toEqual({ device_id: fresh.device.id, state: 'approved', broker_key: t.broker.services.brokerKey.publicKeyPem });
  });
});
