import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerTrustError, parseBrokerPublicKey, verifyBrokerMessage, verifyWelcome } from '../../shared/broker-signature.js';
import { publicKeyPem } from '../../shared/device-key.js';
import WebSocket from 'ws';
import { AGENT_ENROL_PATH, AGENT_WS_PATH, AgentClose, type ControlMessage } from '../../shared/protocol.js';
import { connectDevice, enrolDevice, eventually, makeDevice } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let reader: { token: string };
let manager: { token: string };
let approver: { token: string };
let nobody: { token: string };

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'lab', title: 'Lab' });
  reader = await t.userWith([{ permission: 'bootstrap-keys:read' }]);
  manager = await t.userWith([{ permission: 'bootstrap-keys:manage' }, { permission: 'bootstrap-keys:read' }]);
  approver = await t.userWith([{ permission: 'device:approve' }]);
  nobody = await t.userWith([{ permission: 'device:read' }]);
});
afterAll(async () => {
  await t?.close();
});

async function createKey(body: Record<string, unknown> = {}): Promise<string> {
  const r = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body });
  expect(r.status).toBe(200);
  return Object.keys(r.body)[0];
}

describe('bootstrap keys', () => {
  it('creates a random key answering {"<key>": {group_id, auto_accept}} with defaults, and stores only its hash for lookup', async () => {
    const r = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: {} });
    expect(r.status).toBe(200);
    const [key] = Object.keys(r.body);
    expect(key.length).toBeGreaterThanOrEqual(22); // ≥ 128 bits in base64url
    expect(r.body[key]).toEqual({ group_id: 'unassigned_group', auto_accept: false, label: '', expires_at: null, expired: false });
    const other = await createKey();
    expect(other).not.toBe(key);
    const row = await t.broker.services.store.db.selectFrom('bootstrap_keys').selectAll().where('key_secret', '=', key).executeTakeFirstOrThrow();
    expect(row.key_hash).toBe(crypto.createHash('sha256').update(key).digest('hex'));
  });

  it('lists, reads (by key or key_id), changes and deletes keys', async () => {
    const key = await createKey({ group_id: 'lab', auto_accept: true });
    // Answers are maps (qbee's shape): keyed by the key for manage holders, by key_id without the secret for readers.
    const list = await t.api('GET', '/api/v2/bootstrapkeylist', { token: manager.token });
    expect(list.status).toBe(200);
    const item = list.body[key];
    expect(item).toMatchObject({ key, group_id: 'lab', auto_accept: true });
    expect(Date.parse(item.created_at)).toBeGreaterThan(0);
    const readerList = await t.api('GET', '/api/v2/bootstrapkeylist', { token: reader.token });
    expect(readerList.body[item.key_id]).toEqual({
      key_id: item.key_id,
      group_id: 'lab',
      auto_accept: true,
      created_at: item.created_at,
      label: '',
      expires_at: null,
      expired: false,
      devices: 0,
    });
    expect(JSON.stringify(readerList.body)).not.toContain(key);
    const paged = await t.api('GET', '/api/v2/bootstrapkeylist?items_per_page=1&offset=0', { token: reader.token });
    expect(Object.keys(paged.body)).toHaveLength(1);

    const byKey = await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: manager.token });
    expect(byKey.status).toBe(200);
    expect(byKey.body[key]).toMatchObject({ key, group_id: 'lab', auto_accept: true });
    const byId = await t.api('GET', `/api/v2/bootstrapkey/${item.key_id}`, { token: reader.token });
    expect(Object.keys(byId.body)).toEqual([item.key_id]);
    expect(byId.body[item.key_id].key).toBeUndefined();

    const changed = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { auto_accept: false } });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({ key, group_id: 'lab', auto_accept: false });
    const moved = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { group_id: 'unassigned_group' } });
    expect(moved.body).toMatchObject({ group_id: 'unassigned_group', auto_accept: false });

    expect((await t.api('DELETE', `/api/v2/bootstrapkey/${key}`, { token: manager.token })).status).toBe(204);
    expect((await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: reader.token })).status).toBe(404);
    expect((await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { auto_accept: true } })).status).toBe(404);
    expect((await t.api('DELETE', `/api/v2/bootstrapkey/${key}`, { token: manager.token })).status).toBe(404);
    // A deleted key enrols nothing.
    const { answer } = await enrolDevice(t, key);
    expect(answer.status).toBe(403);
    expect(answer.body.error).toBe('unknown_bootstrap_key');
  });

  it('counts the devices enrolled with each key in the list', async () => {
    const key = await createKey();
    const unused = await createKey();
    expect((await enrolDevice(t, key)).answer.status).toBe(200);
    expect((await enrolDevice(t, key)).answer.status).toBe(200);
    const list = await t.api('GET', '/api/v2/bootstrapkeylist', { token: manager.token });
    expect(list.body[key].devices).toBe(2);
    expect(list.body[unused].devices).toBe(0);
  });

  it('keeps a label and an expiry, changes and clears them; an expired key refuses enrolment with bootstrap_key_expired', async () => {
    const in1h = new Date(Date.now() + 3600_000).toISOString();
    const r = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { label: 'Rack 4 batch', expires_at: in1h } });
    expect(r.status).toBe(200);
    const [key] = Object.keys(r.body);
    expect(r.body[key]).toMatchObject({ label: 'Rack 4 batch', expires_at: in1h, expired: false });
    const asReader = (await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: reader.token })).body;
    expect(Object.values(asReader)).toEqual([expect.objectContaining({ label: 'Rack 4 batch', expires_at: in1h })]);
    // Before it expires, devices enrol.
    expect((await enrolDevice(t, key)).answer.status).toBe(200);

    // Time passes (the stored expiry is moved back: the broker compares with its clock at each enrolment).
    const past = new Date(Date.now() - 1000).toISOString();
    await t.broker.services.store.db.updateTable('bootstrap_keys').set({ expires_at: past }).where('key_secret', '=', key).execute();
    const expired = await enrolDevice(t, key);
    expect(expired.answer.status).toBe(403);
    expect(expired.answer.body).toMatchObject({ code: 403, error: 'bootstrap_key_expired', expires_at: past });
    expect(expired.answer.body.message).toMatch(/expired/);
    expect((await t.api('GET', '/api/v2/bootstrapkeylist', { token: manager.token })).body[key]).toMatchObject({ expired: true, devices: 1 });

    // Extended (PUT, a time ahead), it enrols again; cleared (null), it never expires.
    const in2d = new Date(Date.now() + 2 * 86400_000).toISOString();
    const extended = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { expires_at: in2d, label: 'Rack 5' } });
    expect(extended.status).toBe(200);
    expect(extended.body).toMatchObject({ label: 'Rack 5', expires_at: in2d, expired: false });
    expect((await enrolDevice(t, key)).answer.status).toBe(200);
    const cleared = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { expires_at: null } });
    expect(cleared.body).toMatchObject({ label: 'Rack 5', expires_at: null, expired: false });
    // Fields left out stay.
    expect((await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { auto_accept: true } })).body).toMatchObject({
      label: 'Rack 5',
      expires_at: null,
    });
  });

  it('refuses a past expiry, a bad date and a bad label, changing nothing', async () => {
    const before = Object.keys((await t.api('GET', '/api/v2/bootstrapkeylist', { token: manager.token })).body).length;
    const past = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { expires_at: new Date(Date.now() - 60_000).toISOString() } });
    expect(past.status).toBe(400);
    expect(past.body).toMatchObject({ code: 400, field: 'expires_at' });
    const notADate = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { expires_at: 'next tuesday' } });
    expect(notADate.status).toBe(400);
    expect(notADate.body.field).toBe('expires_at');
    const longLabel = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { label: 'x'.repeat(101) } });
    expect(longLabel.status).toBe(400);
    expect(longLabel.body.field).toBe('label');
    const controlLabel = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { label: 'a\u001b[31mb' } });
    expect(controlLabel.status).toBe(400);
    expect(controlLabel.body.field).toBe('label');
    expect(Object.keys((await t.api('GET', '/api/v2/bootstrapkeylist', { token: manager.token })).body)).toHaveLength(before);

    const key = await createKey({ label: 'kept' });
    const pastPut = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { label: 'changed', expires_at: '2001-01-01T00:00:00Z' } });
    expect(pastPut.status).toBe(400);
    expect(pastPut.body.field).toBe('expires_at');
    expect((await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: manager.token })).body[key]).toMatchObject({ label: 'kept', expires_at: null });
    // Readers cannot change them.
    expect((await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: reader.token, body: { label: 'mine' } })).status).toBe(403);
  });

  it('refuses bad input with 400 naming the field', async () => {
    const unknownGroup = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { group_id: 'no-such-group' } });
    expect(unknownGroup.status).toBe(400);
    expect(unknownGroup.body).toMatchObject({ code: 400, error: 'unknown_group', field: 'group_id' });
    const deviceAsGroup = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { group_id: await t.addDevice() } });
    expect(deviceAsGroup.status).toBe(400);
    expect(deviceAsGroup.body.field).toBe('group_id');
    const badFlag = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { auto_accept: 'yes' } });
    expect(badFlag.status).toBe(400);
    expect(badFlag.body.field).toBe('auto_accept');
    const extra = await t.api('POST', '/api/v2/bootstrapkey', { token: manager.token, body: { group: 'lab' } });
    expect(extra.status).toBe(400);
    const key = await createKey();
    const badPut = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: manager.token, body: { group_id: 'nope' } });
    expect(badPut.status).toBe(400);
    expect(badPut.body.field).toBe('group_id');
    const badRef = await t.api('GET', '/api/v2/bootstrapkey/not%20a%20key', { token: reader.token });
    expect(badRef.status).toBe(400);
    const badPage = await t.api('GET', '/api/v2/bootstrapkeylist?items_per_page=0', { token: reader.token });
    expect(badPage.status).toBe(400);
    expect(badPage.body.field).toBe('items_per_page');
  });

  it('needs bootstrap-keys:read to read and bootstrap-keys:manage to change', async () => {
    const key = await createKey();
    expect((await t.api('GET', '/api/v2/bootstrapkeylist')).status).toBe(401);
    expect((await t.api('POST', '/api/v2/bootstrapkey', { body: {} })).status).toBe(401);
    expect((await t.api('GET', '/api/v2/bootstrapkeylist', { token: nobody.token })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: nobody.token })).status).toBe(403);
    const denied = await t.api('POST', '/api/v2/bootstrapkey', { token: reader.token, body: {} });
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ code: 403, error: 'forbidden' });
    expect((await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { token: reader.token, body: { auto_accept: true } })).status).toBe(403);
    expect((await t.api('DELETE', `/api/v2/bootstrapkey/${key}`, { token: reader.token })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: reader.token })).status).toBe(200);
  });

  it('shows the key secret only to holders of bootstrap-keys:manage', async () => {
    const key = await createKey({ group_id: 'lab' });
    const list = await t.api('GET', '/api/v2/bootstrapkeylist?items_per_page=1000', { token: reader.token });
    expect(list.status).toBe(200);
    expect(JSON.stringify(list.body)).not.toContain(key);
    const keyId = (await t.api('GET', `/api/v2/bootstrapkey/${key}`, { token: manager.token })).body[key].key_id;
    const item = list.body[keyId];
    expect(item).toMatchObject({ group_id: 'lab', auto_accept: false });
    expect(item.key).toBeUndefined();
    const one = await t.api('GET', `/api/v2/bootstrapkey/${keyId}`, { token: reader.token });
    expect(one.status).toBe(200);
    expect(one.body[keyId]).toMatchObject({ key_id: keyId, group_id: 'lab' });
    expect(JSON.stringify(one.body)).not.toContain(key);
    const managed = await t.api('GET', '/api/v2/bootstrapkeylist?items_per_page=1000', { token: manager.token });
    expect(managed.body[key].key).toBe(key);
  });
});

describe('enrolment and pending hosts', () => {
  it('enrols a key pair as a pending host, idempotently, with the device id = sha256 of its public key', async () => {
    const key = await createKey({ group_id: 'lab' });
    const device = makeDevice();
    const first = await enrolDevice(t, key, device, 'edge-1');
    expect(first.answer.status).toBe(200);
    expect(first.answer.body).toEqual({ device_id: device.id, state: 'pending', broker_key: t.broker.services.brokerKey.publicKeyPem });
    const again = await enrolDevice(t, key, device, 'edge-1');
    expect(again.answer.body).toEqual({ device_id: device.id, state: 'pending', broker_key: t.broker.services.brokerKey.publicKeyPem });

    const pending = await t.api('GET', '/api/v2/pendinghost', { token: approver.token });
    expect(pending.status).toBe(200);
    const host = pending.body.find((h: { node_id: string }) => h.node_id === device.id);
    expect(host).toMatchObject({ node_id: device.id, hostname: 'edge-1', last_ip: '127.0.0.1', group_id: 'lab' });
    expect(host.public_key_fingerprint).toMatch(/^SHA256:/);
    expect(Date.parse(host.created_at)).toBeGreaterThan(0);
    expect(pending.body.filter((h: { node_id: string }) => h.node_id === device.id)).toHaveLength(1);

    // Not in the tree while pending.
    expect((await t.api('GET', `/api/v2/node/${device.id}`, { token: t.adminToken })).status).toBe(404);
    // The agent channel says "wait".
    const conn = await connectDevice(t.url, device);
    expect(await conn.closed).toBe(AgentClose.pending);
  });

  it('refuses bad enrolments: unknown key 403, malformed key or host 400', async () => {
    const key = await createKey();
    const unknown = await enrolDevice(t, 'x'.repeat(32));
    expect(unknown.answer.status).toBe(403);
    expect(unknown.answer.body).toMatchObject({ code: 403, error: 'unknown_bootstrap_key' });
    expect(unknown.answer.body.message).toMatch(/bootstrap key/);

    const notPem = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: key, public_key: 'hello', hostname: 'h' } });
    expect(notPem.status).toBe(400);
    expect(notPem.body.field).toBe('public_key');
    const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 1024 });
    const wrongType = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: key, public_key: publicKeyPem(rsa.publicKey), hostname: 'h' } });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body.message).toMatch(/P-256/);
    const noHost = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: key, public_key: makeDevice().publicKeyPem } });
    expect(noHost.status).toBe(400);
    expect(noHost.body.field).toBe('hostname');
    const control = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: key, public_key: makeDevice().publicKeyPem, hostname: 'a\nb' } });
    expect(control.status).toBe(400);
    const extra = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: key, public_key: makeDevice().publicKeyPem, hostname: 'h', secret: 1 } });
    expect(extra.status).toBe(400);
  });

  it('approves a pending host into its key group; the agent is then welcomed', async () => {
    const key = await createKey({ group_id: 'lab' });
    const { device } = await enrolDevice(t, key);
    const r = await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: { node_id: device.id } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: device.id, state: 'approved', group_id: 'lab' });
    const node = await t.api('GET', `/api/v2/node/${device.id}`, { token: t.adminToken });
    expect(node.status).toBe(200);
    expect(node.body.parent_id).toBe('lab');
    const pending = await t.api('GET', '/api/v2/pendinghost', { token: approver.token });
    expect(pending.body.some((h: { node_id: string }) => h.node_id === device.id)).toBe(false);
    // Enrolling again answers the new state.
    expect((await enrolDevice(t, key, device)).answer.body.state).toBe('approved');

    const again = await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: { node_id: device.id } });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('not_pending');

    const conn = await connectDevice(t.url, device);
    expect(conn.welcome).toMatchObject({ device_id: device.id });
    expect(conn.welcome!.heartbeat_ms).toBeGreaterThan(0);
    await eventually(() => t.broker.services.agents.isConnected(device.id));
    const status = await t.api('GET', `/api/v2/device/${device.id}/status`, { token: t.adminToken });
    expect(status.body).toMatchObject({ uuid: device.id, connected: true, remote_access: true });
    // The contact is written with the broker's other writes of that turn, after the agent counts as connected.
    const row = await eventually(
      async () => {
        const found = await t.broker.services.store.db.selectFrom('devices').selectAll().where('device_id', '=', device.id).executeTakeFirstOrThrow();
        return found.agent_version !== null && found;
      },
      20_000,
      'the agent version recorded',
    );
    expect(row.agent_version).toBe('9.9.9-test');
    expect(row.last_ip).toBe('127.0.0.1');
    conn.ws.close();
    await conn.closed;
    await eventually(() => !t.broker.services.agents.isConnected(device.id));
  });

  it('places a device in unassigned_group when its key group is gone', async () => {
    await t.addGroup({ id: 'doomed' });
    const key = await createKey({ group_id: 'doomed' });
    const { device } = await enrolDevice(t, key);
    await t.broker.services.store.db.deleteFrom('nodes').where('node_id', '=', 'doomed').execute();
    const r = await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: { node_id: device.id } });
    expect(r.status).toBe(200);
    expect(r.body.group_id).toBe('unassigned_group');
  });

  it('approves at once with an auto-accept key', async () => {
    const key = await createKey({ group_id: 'lab', auto_accept: true });
    const { device, answer } = await enrolDevice(t, key);
    expect(answer.body).toEqual({ device_id: device.id, state: 'approved', broker_key: t.broker.services.brokerKey.publicKeyPem });
    const node = await t.api('GET', `/api/v2/node/${device.id}`, { token: t.adminToken });
    expect(node.body.parent_id).toBe('lab');
  });

  it('keeps a host pending under its manual key when it re-enrols with an auto-accept key', async () => {
    const manual = await createKey({ group_id: 'lab' });
    const auto = await createKey({ auto_accept: true });
    const { device } = await enrolDevice(t, manual);
    const again = await enrolDevice(t, auto, device);
    expect(again.answer.status).toBe(200);
    expect(again.answer.body).toEqual({ device_id: device.id, state: 'pending', broker_key: t.broker.services.brokerKey.publicKeyPem });
    const row = await t.broker.services.store.db.selectFrom('devices').selectAll().where('device_id', '=', device.id).executeTakeFirstOrThrow();
    expect(row.state).toBe('pending');
    expect((await t.api('GET', `/api/v2/node/${device.id}`, { token: t.adminToken })).status).toBe(404);
    const pending = await t.api('GET', '/api/v2/pendinghost', { token: approver.token });
    expect(pending.body.find((h: { node_id: string }) => h.node_id === device.id)).toMatchObject({ group_id: 'lab' });
    // A rejected key stays refused whatever key it presents.
    expect((await t.api('DELETE', `/api/v2/pendinghost/${device.id}`, { token: approver.token })).status).toBe(204);
    const afterReject = await enrolDevice(t, auto, device);
    expect(afterReject.answer.status).toBe(403);
    expect(afterReject.answer.body.error).toBe('device_revoked');
  });

  it('rejects a pending host: it leaves the list and its key is refused from then on', async () => {
    const key = await createKey();
    const { device } = await enrolDevice(t, key);
    const r = await t.api('DELETE', `/api/v2/pendinghost/${device.id}`, { token: approver.token });
    expect(r.status).toBe(204);
    const pending = await t.api('GET', '/api/v2/pendinghost', { token: approver.token });
    expect(pending.body.some((h: { node_id: string }) => h.node_id === device.id)).toBe(false);
    const again = await enrolDevice(t, key, device);
    expect(again.answer.status).toBe(403);
    expect(again.answer.body).toMatchObject({ error: 'device_revoked', reason: 'rejected' });
    const conn = await connectDevice(t.url, device);
    expect(await conn.closed).toBe(AgentClose.removed);
    expect((await t.api('DELETE', `/api/v2/pendinghost/${device.id}`, { token: approver.token })).status).toBe(404);
  });

  it('removes an approved device: node and record go, its live connection is cut (4403), its key cannot return', async () => {
    const key = await createKey({ auto_accept: true });
    const { device } = await enrolDevice(t, key);
    const conn = await connectDevice(t.url, device);
    expect(conn.welcome).toBeDefined();
    await eventually(() => t.broker.services.agents.isConnected(device.id));

    const pendingOne = (await enrolDevice(t, await createKey())).device;
    const wrongState = await t.api('DELETE', `/api/v2/removeapprovedhost/${pendingOne.id}`, { token: approver.token });
    expect(wrongState.status).toBe(409);
    expect(wrongState.body.error).toBe('not_approved');
    const wrongState2 = await t.api('DELETE', `/api/v2/pendinghost/${device.id}`, { token: approver.token });
    expect(wrongState2.status).toBe(409);

    const r = await t.api('DELETE', `/api/v2/removeapprovedhost/${device.id}`, { token: approver.token });
    expect(r.status).toBe(204);
    expect(await conn.closed).toBe(AgentClose.removed);
    expect(t.broker.services.agents.isConnected(device.id)).toBe(false);
    expect((await t.api('GET', `/api/v2/node/${device.id}`, { token: t.adminToken })).status).toBe(404);
    const rows = await t.broker.services.store.db.selectFrom('devices').select('device_id').where('device_id', '=', device.id).execute();
    expect(rows).toHaveLength(0);
    const back = await connectDevice(t.url, device);
    expect(await back.closed).toBe(AgentClose.removed);
    const reenrol = await enrolDevice(t, key, device);
    expect(reenrol.answer.status).toBe(403);
    expect(reenrol.answer.body).toMatchObject({ error: 'device_revoked', reason: 'removed' });
    expect((await t.api('DELETE', `/api/v2/removeapprovedhost/${device.id}`, { token: approver.token })).status).toBe(404);
  });

  it('refuses bad node ids with 400 and unknown ones with 404', async () => {
    const bad = await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: { node_id: 'lab' } });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('node_id');
    expect((await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: {} })).status).toBe(400);
    expect((await t.api('DELETE', '/api/v2/pendinghost/NOT-HEX', { token: approver.token })).status).toBe(400);
    expect((await t.api('DELETE', '/api/v2/removeapprovedhost/xyz', { token: approver.token })).status).toBe(400);
    const unknown = 'f'.repeat(64);
    expect((await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: { node_id: unknown } })).status).toBe(404);
    expect((await t.api('DELETE', `/api/v2/removeapprovedhost/${unknown}`, { token: approver.token })).status).toBe(404);
    expect((await t.api('GET', '/api/v2/pendinghost?offset=-1', { token: approver.token })).status).toBe(400);
  });

  it('needs device:approve for pending hosts and removal', async () => {
    const { device } = await enrolDevice(t, await createKey());
    expect((await t.api('GET', '/api/v2/pendinghost')).status).toBe(401);
    for (const [method, p, body] of [
      ['GET', '/api/v2/pendinghost', undefined],
      ['POST', '/api/v2/pendinghost', { node_id: device.id }],
      ['DELETE', `/api/v2/pendinghost/${device.id}`, undefined],
      ['DELETE', `/api/v2/removeapprovedhost/${device.id}`, undefined],
    ] as const) {
      const r = await t.api(method, p, { token: nobody.token, body });
      expect(r.status, `${method} ${p}`).toBe(403);
      expect(r.body.error).toBe('forbidden');
    }
    // Still pending: nothing happened.
    const pending = await t.api('GET', '/api/v2/pendinghost', { token: approver.token });
    expect(pending.body.some((h: { node_id: string }) => h.node_id === device.id)).toBe(true);
  });

  it('audits approval and removal', async () => {
    const { device } = await enrolDevice(t, await createKey());
    await t.api('POST', '/api/v2/pendinghost', { token: approver.token, body: { node_id: device.id } });
    await t.api('DELETE', `/api/v2/removeapprovedhost/${device.id}`, { token: approver.token });
    const rows = await t.broker.services.store.db.selectFrom('audit').select(['event', 'device_id']).where('device_id', '=', device.id).execute();
    expect(rows.map((r) => r.event)).toEqual(expect.arrayContaining(['device.approve', 'device.remove']));
  });
});

describe('the agent channel', () => {
  it('refuses an unknown device and a bad signature with 4401', async () => {
    const stranger = await connectDevice(t.url, makeDevice());
    expect(await stranger.closed).toBe(AgentClose.unauthorized);
    const { device } = await enrolDevice(t, await createKey({ auto_accept: true }));
    const impostor = makeDevice();
    const forged = await connectDevice(t.url, device, (nonce) => crypto.sign('sha256', Buffer.from(nonce), impostor.privateKey).toString('base64'));
    expect(await forged.closed).toBe(AgentClose.unauthorized);
    expect(t.broker.services.agents.isConnected(device.id)).toBe(false);
  });

  it('refuses a malformed answer to the challenge with 4401', async () => {
    for (const answer of ['null', '"auth"', '{"t":"auth","device_id":"short","signature":"x"}', Buffer.from([1, 2, 3])]) {
      const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}${AGENT_WS_PATH}`);
      const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
      ws.once('message', () => ws.send(answer));
      expect(await closed).toBe(AgentClose.unauthorized);
    }
  });

  it('keeps one connection per device: a newer one replaces the older (4000)', async () => {
    const { device } = await enrolDevice(t, await createKey({ auto_accept: true }));
    const first = await connectDevice(t.url, device);
    const second = await connectDevice(t.url, device);
    expect(second.welcome).toBeDefined();
    expect(await first.closed).toBe(AgentClose.replaced);
    await new Promise((r) => setTimeout(r, 50));
    expect(t.broker.services.agents.isConnected(device.id)).toBe(true);
    second.ws.close();
    await second.closed;
    await eventually(() => !t.broker.services.agents.isConnected(device.id));
  });

  it('hands out its signing key at enrolment, proves it in the welcome, and signs configurations for this device and connection', async () => {
    const { device, answer } = await enrolDevice(t, await createKey({ auto_accept: true }));
    expect(answer.status).toBe(200);
    const brokerKey = parseBrokerPublicKey(answer.body.broker_key);
    expect(brokerKey.equals(t.broker.services.brokerKey.publicKey)).toBe(true);
    const nonce = crypto.randomBytes(32).toString('base64url');
    const conn = await connectDevice(t.url, device, undefined, { nonce });
    expect(conn.welcome?.broker_key).toBe(answer.body.broker_key);
    const fields = { device_id: device.id, agent_nonce: nonce, challenge: conn.challenge! };
    expect(verifyWelcome(brokerKey, fields, conn.welcome?.broker_signature)).toBe(true);
    expect(verifyWelcome(brokerKey, { ...fields, agent_nonce: 'another-nonce' }, conn.welcome?.broker_signature)).toBe(false);

    const config: ControlMessage = { t: 'config', config: { commit_id: 'c1', bundles: [], bundle_data: {} }, attributes: {} };
    expect(t.broker.services.agents.send(device.id, config)).toBe(true);
    expect(t.broker.services.agents.send(device.id, { t: 'agent_update', version: '9.9.9', sha256: 'a'.repeat(64), size: 10 })).toBe(true);
    const [first, second] = await eventually(() => (conn.messages.length >= 2 ? conn.messages : undefined));
    expect(verifyBrokerMessage(brokerKey, first, { deviceId: device.id, nonce, afterSeq: 0 })).toEqual({ ok: true, seq: 1 });
    expect(verifyBrokerMessage(brokerKey, second, { deviceId: device.id, nonce, afterSeq: 1 })).toEqual({ ok: true, seq: 2 });
    // What another device or a later connection would be sent does not pass for this one.
    expect(verifyBrokerMessage(brokerKey, first, { deviceId: makeDevice().id, nonce, afterSeq: 0 })).toEqual({
      ok: false,
      error: BrokerTrustError.otherDevice,
    });
    expect(verifyBrokerMessage(brokerKey, first, { deviceId: device.id, nonce: 'next-connection', afterSeq: 0 })).toEqual({
      ok: false,
      error: BrokerTrustError.otherConnection,
    });
    conn.ws.close();
    await conn.closed;
  });

  it('proves its key when it refuses an unknown device, so that the agent enrols again only with it', async () => {
    const stranger = makeDevice();
    const nonce = crypto.randomBytes(32).toString('base64url');
    const conn = await connectDevice(t.url, stranger, undefined, { nonce });
    expect(await conn.closed).toBe(AgentClose.unauthorized);
    const refusal = conn.messages.find((m) => m.t === 'unknown_device');
    const fields = { device_id: stranger.id, agent_nonce: nonce, challenge: conn.challenge!, outcome: 'unknown_device' as const };
    expect(verifyWelcome(t.broker.services.brokerKey.publicKey, fields, refusal?.broker_signature)).toBe(true);
    expect(verifyWelcome(t.broker.services.brokerKey.publicKey, { ...fields, outcome: 'welcome' }, refusal?.broker_signature)).toBe(false);
  });

  it('stores inventory reports and answers reload with the ack', async () => {
    const { device } = await enrolDevice(t, await createKey({ auto_accept: true }));
    const conn = await connectDevice(t.url, device);
    conn.send({ t: 'inventory', data: { hostname: 'reported', kernel: '6.1.0' } });
    const inv = await eventually(async () => {
      const r = await t.api('GET', `/api/v2/inventory/${device.id}`, { token: t.adminToken });
      return r.status === 200 ? r.body : undefined;
    });
    expect(inv).toMatchObject({ device_id: device.id, hostname: 'reported', kernel: '6.1.0' });
    conn.ws.on('message', (data) => {
      const msg = JSON.parse(String(data));
      if (msg.t === 'reload') conn.send({ t: 'reload_ack', id: msg.id });
    });
    await expect(t.broker.services.agents.reload(device.id)).resolves.toBeUndefined();
    conn.ws.close();
    await conn.closed;
    await expect(t.broker.services.agents.reload(device.id)).rejects.toThrow(/not connected/);
  });
});

describe('keep-alive', () => {
  it('cuts off an agent that stops answering pings for 3 heartbeats', async () => {
    const quick = await startTestBroker({ env: { AGENT_HEARTBEAT_MS: '1000' } });
    try {
      const created = await quick.api('POST', '/api/v2/bootstrapkey', { token: quick.adminToken, body: { auto_accept: true } });
      const { device } = await enrolDevice(quick, Object.keys(created.body)[0]);
      const mute = await connectDevice(quick.url, device, undefined, { autoPong: false });
      expect(mute.welcome?.heartbeat_ms).toBe(1000);
      expect(quick.broker.services.agents.isConnected(device.id)).toBe(true);
      expect(await mute.closed).toBe(1006); // terminated, no close handshake
      await eventually(() => !quick.broker.services.agents.isConnected(device.id), 5000, 'the broker to drop the connection');
      const row = await quick.broker.services.store.db.selectFrom('devices').select('last_seen').where('device_id', '=', device.id).executeTakeFirstOrThrow();
      expect(Date.parse(row.last_seen as string)).toBeGreaterThan(Date.now() - 60_000);
    } finally {
      await quick.close();
    }
  });
});

describe('OpenAPI document', () => {
  it('documents the agent endpoints, bootstrap keys and pending hosts', async () => {
    const doc = (await t.api('GET', '/api/v2/openapi.json')).body;
    expect(doc.paths['/api/v2/agent/ws'].get.description).toMatch(/challenge/);
    expect(doc.paths['/api/v2/agent/enrol'].post.security).toEqual([]);
    expect(doc.paths['/api/v2/bootstrapkey'].post['x-permission']).toBe('bootstrap-keys:manage');
    expect(doc.paths['/api/v2/pendinghost'].get['x-permission']).toBe('device:approve');
    expect(doc.paths['/api/v2/device/{device_id}/status'].get['x-permission']).toBe('device:read');
  });
});

describe('enrolment rate limit', () => {
  it('limits failed enrolments per address with 429', async () => {
    let last = 0;
    for (let i = 0; i < 25 && last !== 429; i++) last = (await enrolDevice(t, `wrong-key-${i}`)).answer.status;
    expect(last).toBe(429);
    const r = await enrolDevice(t, 'wrong-key-final');
    expect(r.answer.body).toMatchObject({ code: 429, error: 'rate_limited' });
    expect(r.answer.headers.get('retry-after')).toMatch(/^\d+$/);
  });
});
