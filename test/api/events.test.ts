/** GET /api/v2/events: the live device event stream (server-sent events). */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectDevice, enrolDevice } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

interface Stream {
  status: number;
  type: string;
  text: () => string;
  /** Resolves once the stream holds this text. */
  until: (needle: string) => Promise<void>;
  close: () => void;
}

function openStream(query: string, token?: string): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${t.url}/api/v2/events${query}`, { headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
      let text = '';
      const waiters: (() => void)[] = [];
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        waiters.splice(0).forEach((w) => w());
      });
      res.on('error', () => {});
      resolve({
        status: res.statusCode ?? 0,
        type: String(res.headers['content-type'] ?? ''),
        text: () => text,
        until: (needle) =>
          new Promise<void>((done) => {
            const check = () => (text.includes(needle) ? done() : waiters.push(check));
            check();
          }),
        close: () => req.destroy(),
      });
    });
    req.on('error', reject);
  });
}

async function ticketFor(token: string): Promise<string> {
  const r = await t.api<{ ticket: string }>('POST', '/api/v2/remote/ticket', { token, body: {} });
  expect(r.status).toBe(200);
  return r.body.ticket;
}

describe('GET /api/v2/events', () => {
  it('refuses a caller without a token, a spent ticket and a user without device:read', async () => {
    const none = await openStream('');
    expect(none.status).toBe(401);
    none.close();

    const ticket = await ticketFor(t.adminToken);
    const first = await openStream(`?ticket=${ticket}`);
    expect(first.status).toBe(200);
    expect(first.type).toContain('text/event-stream');
    first.close();
    const again = await openStream(`?ticket=${ticket}`);
    expect(again.status).toBe(401);
    await again.until('invalid_ticket');
    again.close();

    const auditor = await t.userWith([{ permission: 'audit:read' }]);
    const refused = await openStream('', auditor.token);
    expect(refused.status).toBe(403);
    refused.close();
  });

  it('tells each user about the devices they may read only', async () => {
    await t.addGroup({ id: 'ev-mine' });
    await t.addGroup({ id: 'ev-other' });
    const mine = await t.addDevice({ parent: 'ev-mine' });
    const other = await t.addDevice({ parent: 'ev-other' });
    const user = await t.userWith([{ permission: 'device:read', resources: ['node:ev-mine'] }]);

    const admin = await openStream('', t.adminToken);
    const restricted = await openStream(`?ticket=${await ticketFor(user.token)}`);
    expect(restricted.status).toBe(200);
    await Promise.all([admin.until(': connected'), restricted.until(': connected')]);

    // Events go out in order: once the restricted user has the second, the first was decided.
    t.broker.services.agents.emit('connected', other);
    t.broker.services.agents.emit('connected', mine);
    t.broker.services.agents.emit('disconnected', mine);
    await admin.until(`"event":"device.offline","device_id":"${mine}"`);
    await restricted.until(`"event":"device.offline","device_id":"${mine}"`);
    expect(admin.text()).toContain(`"event":"device.online","device_id":"${other}"`);
    expect(restricted.text()).toContain(`event: device.online\ndata: {"event":"device.online","device_id":"${mine}"`);
    expect(restricted.text()).not.toContain(other);
    admin.close();
    restricted.close();
  });

  it('reports a real agent connecting and leaving', async () => {
    const created = await t.api<Record<string, unknown>>('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
    const { device, answer } = await enrolDevice(t, Object.keys(created.body)[0]);
    expect(answer.status).toBe(200);
    const stream = await openStream('', t.adminToken);
    await stream.until(': connected');
    const conn = await connectDevice(t.url, device);
    expect(conn.welcome?.device_id).toBe(device.id);
    await stream.until(`"event":"device.online","device_id":"${device.id}"`);
    conn.ws.close();
    await stream.until(`"event":"device.offline","device_id":"${device.id}"`);
    stream.close();
  });

  it('tells holders of device:approve, and only them, of pending hosts appearing, approved and rejected', async () => {
    const created = await t.api<Record<string, unknown>>('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: false } });
    const key = Object.keys(created.body)[0];
    const approver = await t.userWith([{ permission: 'device:approve' }]); // no device:read: may still listen, for pending hosts
    const reader = await t.userWith([{ permission: 'device:read' }]); // may not list pending hosts: hears none of them
    const approverStream = await openStream(`?ticket=${await ticketFor(approver.token)}`);
    expect(approverStream.status).toBe(200);
    const readerStream = await openStream('', reader.token);
    await Promise.all([approverStream.until(': connected'), readerStream.until(': connected')]);

    const first = await enrolDevice(t, key, undefined, 'pending-one');
    const second = await enrolDevice(t, key, undefined, 'pending-two');
    expect(first.answer.body).toMatchObject({ state: 'pending' });
    await approverStream.until(`"event":"pending.added","device_id":"${second.device.id}","hostname":"pending-two"`);
    expect(approverStream.text()).toContain(`event: pending.added\ndata: {"event":"pending.added","device_id":"${first.device.id}","hostname":"pending-one"`);
    // Enrolling again with the same key is no new pending host.
    await enrolDevice(t, key, first.device, 'pending-one');
    expect((await t.api('POST', '/api/v2/pendinghost', { token: t.adminToken, body: { node_id: first.device.id } })).status).toBe(200);
    expect((await t.api('DELETE', `/api/v2/pendinghost/${second.device.id}`, { token: t.adminToken })).status).toBe(204);
    await approverStream.until(`"event":"pending.removed","device_id":"${second.device.id}"`);
    expect(approverStream.text()).toContain(`"event":"pending.approved","device_id":"${first.device.id}"`);
    expect(approverStream.text().split('pending.added').length - 1).toBe(4); // two events, each naming it twice
    // An approval that fails (no longer pending) tells nobody anything.
    expect((await t.api('POST', '/api/v2/pendinghost', { token: t.adminToken, body: { node_id: first.device.id } })).status).toBe(409);
    // The device:read holder got a device event since, so the pending ones were not merely late.
    t.broker.services.agents.emit('connected', first.device.id);
    await readerStream.until(`"event":"device.online","device_id":"${first.device.id}"`);
    expect(readerStream.text()).not.toContain('pending.');
    expect(approverStream.text().split('pending.approved').length - 1).toBe(2);
    approverStream.close();
    readerStream.close();
  });

  it('still refuses a user with neither device:read nor device:approve', async () => {
    const other = await t.userWith([{ permission: 'bootstrap-keys:read' }]);
    const refused = await openStream('', other.token);
    expect(refused.status).toBe(403);
    refused.close();
  });
});
