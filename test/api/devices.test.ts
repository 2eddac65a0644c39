/** Device attributes: GET/PATCH /deviceattribute/{device_id}. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
const url = (id: string) => `/api/v2/deviceattribute/${id}`;
const LEGACY = ['device_name', 'description', 'latitude', 'longitude', 'country', 'city', 'zip', 'address'];

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

async function patch(id: string, body: unknown, token = t.adminToken) {
  return t.api('PATCH', url(id), { token, body });
}
async function read(id: string, token = t.adminToken) {
  return t.api('GET', url(id), { token });
}

describe('GET /deviceattribute/{device_id}', () => {
  it('answers every legacy field as a string, "" when unset, custom and custom_max', async () => {
    const id = await t.addDevice({ name: 'edge-1' });
    const r = await read(id);
    expect(r.status).toBe(200);
    for (const field of LEGACY) expect(typeof r.body[field]).toBe('string');
    expect(r.body).toMatchObject({ device_name: 'edge-1', description: '', latitude: '', longitude: '', country: '', city: '', zip: '', address: '' });
    expect(r.body.custom).toEqual({});
    expect(r.body.custom_max).toBe(100);
  });

  it('refuses a malformed device id with 400 naming device_id', async () => {
    for (const bad of ['abc', 'A'.repeat(64), `${'a'.repeat(63)}g`]) {
      const r = await read(bad);
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ code: 400, error: 'invalid_request', field: 'device_id' });
    }
  });

  it('answers 404 for an unknown device once the permission is held, 403 without it, 401 without a token', async () => {
    const unknown = 'f'.repeat(64);
    expect((await read(unknown)).status).toBe(404);
    expect((await read(unknown)).body).toMatchObject({ code: 404, error: 'not_found' });
    const nobody = await t.userWith([{ permission: 'users:read' }]);
    expect((await read(unknown, nobody.token)).status).toBe(403);
    expect((await t.api('GET', url(unknown))).status).toBe(401);
  });
});

describe('PATCH /deviceattribute/{device_id}', () => {
  it('changes only the given fields and answers the whole record', async () => {
    const id = await t.addDevice({ name: 'partial' });
    const r = await patch(id, { description: 'rack 4', city: 'Oslo' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ device_name: 'partial', description: 'rack 4', city: 'Oslo', country: '', custom: {}, custom_max: 100 });
    const again = await patch(id, { zip: '0150' });
    expect(again.body).toMatchObject({ device_name: 'partial', description: 'rack 4', city: 'Oslo', zip: '0150' });
    expect((await read(id)).body).toEqual(again.body);
  });

  it('combines legacy and custom fields in one request', async () => {
    const id = await t.addDevice();
    const r = await patch(id, { country: 'Norway', latitude: '59.91', longitude: '10.75', custom: { site: 'oslo-1', owner: 'ops' } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ country: 'Norway', latitude: '59.91', longitude: '10.75', custom: { site: 'oslo-1', owner: 'ops' } });
    const replaced = await patch(id, { custom: { site: 'oslo-2' } });
    expect(replaced.body.custom).toEqual({ site: 'oslo-2', owner: 'ops' });
  });

  it('clears a legacy field with "" and removes only the custom key sent with ""', async () => {
    const id = await t.addDevice();
    await patch(id, { description: 'to clear', address: 'Main st 1', custom: { a: '1', b: '2', c: '3' } });
    const r = await patch(id, { description: '', custom: { b: '' } });
    expect(r.status).toBe(200);
    expect(r.body.description).toBe('');
    expect(r.body.address).toBe('Main st 1');
    expect(r.body.custom).toEqual({ a: '1', c: '3' });
    // Removing a key that is not there is not an error.
    expect((await patch(id, { custom: { nope: '' } })).body.custom).toEqual({ a: '1', c: '3' });
  });

  it('accepts coordinates at the limits, as strings or numbers, and clears them with ""', async () => {
    const id = await t.addDevice();
    expect((await patch(id, { latitude: '-90', longitude: '180' })).body).toMatchObject({ latitude: '-90', longitude: '180' });
    expect((await patch(id, { latitude: 90, longitude: -180.0 })).body).toMatchObject({ latitude: '90', longitude: '-180' });
    expect((await patch(id, { latitude: 12.5, longitude: '-0.125' })).body).toMatchObject({ latitude: '12.5', longitude: '-0.125' });
    expect((await patch(id, { latitude: '', longitude: '' })).body).toMatchObject({ latitude: '', longitude: '' });
  });

  it('refuses coordinates out of range or not decimal with 400 naming the field', async () => {
    const id = await t.addDevice();
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ latitude: '90.0001' }, 'latitude'],
      [{ latitude: -91 }, 'latitude'],
      [{ latitude: 'north' }, 'latitude'],
      [{ latitude: '1e1' }, 'latitude'],
      [{ latitude: ' 10' }, 'latitude'],
      [{ latitude: true }, 'latitude'],
      [{ longitude: '180.5' }, 'longitude'],
      [{ longitude: -200 }, 'longitude'],
      [{ longitude: 'NaN' }, 'longitude'],
    ];
    for (const [body, field] of cases) {
      const r = await patch(id, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body).toMatchObject({ code: 400, error: 'invalid_request', field });
      expect(r.body.message).toContain(field);
    }
  });

  it('refuses a custom key named like a legacy field, naming the key; such a key can still be removed', async () => {
    const id = await t.addDevice();
    for (const key of ['latitude', 'device_name']) {
      const r = await patch(id, { custom: { owner: 'ops', [key]: '52.5' } });
      expect(r.body).toMatchObject({ code: 400, error: 'invalid_request', field: `custom.${key}` });
      expect(r.body.message).toContain(`"${key}"`);
    }
    expect((await t.api('GET', `/api/v2/deviceattribute/${id}`, { token: t.adminToken })).body.custom).toEqual({});
    const removed = await patch(id, { custom: { latitude: '' } });
    expect(removed.status).toBe(200);
  });

  it('enforces key length, value length and legacy length limits, naming the key', async () => {
    const id = await t.addDevice();
    const longKey = 'k'.repeat(65);
    let r = await patch(id, { custom: { [longKey]: 'v' } });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe(`custom.${longKey}`);
    r = await patch(id, { custom: { '': 'v' } });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('custom.');
    r = await patch(id, { custom: { big: 'v'.repeat(4097) } });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('custom.big');
    r = await patch(id, { custom: { 'bad\nkey': 'v' } });
    expect(r.status).toBe(400);
    r = await patch(id, { custom: { ok: 5 } });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('custom.ok');
    r = await patch(id, { description: 'd'.repeat(1025) });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('description');
    // At the limits it works.
    r = await patch(id, { description: 'd'.repeat(1024), custom: { ['k'.repeat(64)]: 'v'.repeat(4096) } });
    expect(r.status).toBe(200);
    expect(r.body.custom['k'.repeat(64)]).toHaveLength(4096);
  });

  it('never lets a custom key reach the object prototype', async () => {
    const id = await t.addDevice();
    // Refused by name, not silently dropped; and nothing of the request is stored.
    for (const body of ['{"custom":{"__proto__":{"polluted":"yes"},"fine":"1"}}', '{"custom":{"__proto__":"x","fine":"1"}}']) {
      const r = await patch(id, body);
      expect(r.status, body).toBe(400);
      expect(r.body.field).toBe('custom.__proto__');
      expect(r.body.message).toContain('__proto__');
    }
    expect((await t.api('GET', `/api/v2/deviceattribute/${id}`, { token: t.adminToken })).body.custom).toEqual({});
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    for (const key of ['constructor', 'prototype']) {
      const refused = await patch(id, { custom: { [key]: 'x' } });
      expect(refused.status).toBe(400);
      expect(refused.body.field).toBe(`custom.${key}`);
    }
  });

  it('refuses unknown fields and non-object custom', async () => {
    const id = await t.addDevice();
    let r = await patch(id, { descripton: 'typo' });
    expect(r.status).toBe(400);
    expect(r.body.message).toContain('descripton');
    r = await patch(id, { custom: ['a'] });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('custom');
  });

  it('holds at most custom_max custom keys; replacing and swapping keys at the limit works', async () => {
    const id = await t.addDevice();
    const hundred = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`key${i}`, `v${i}`]));
    expect((await patch(id, { custom: hundred })).status).toBe(200);
    const over = await patch(id, { city: 'Bergen', custom: { key100: 'one too many' } });
    expect(over.status).toBe(400);
    expect(over.body).toMatchObject({ code: 400, field: 'custom' });
    expect(over.body.message).toContain('100');
    const after = await read(id);
    expect(Object.keys(after.body.custom)).toHaveLength(100);
    expect(after.body.city).toBe(''); // all or nothing
    expect((await patch(id, { custom: { key5: 'replaced' } })).status).toBe(200);
    const swapped = await patch(id, { custom: { key0: '', key100: 'swapped in' } });
    expect(swapped.status).toBe(200);
    expect(swapped.body.custom.key100).toBe('swapped in');
    expect(swapped.body.custom.key0).toBeUndefined();
    expect(Object.keys(swapped.body.custom)).toHaveLength(100);
  });

  it('is all or nothing: one bad field leaves the record unchanged', async () => {
    const id = await t.addDevice({ name: 'atomic' });
    await patch(id, { description: 'before', custom: { keep: 'yes' } });
    const before = (await read(id)).body;
    const r = await patch(id, { description: 'after', device_name: 'renamed', custom: { keep: '', added: 'x' }, longitude: '181' });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('longitude');
    expect((await read(id)).body).toEqual(before);
    const node = await t.api('GET', `/api/v2/node/${id}`, { token: t.adminToken });
    expect(node.body.title).toBe('atomic');
  });

  it('loses no update when several changes to one device arrive at once', async () => {
    const id = await t.addDevice({ name: 'busy' });
    const answers = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) => patch(id, { custom: { [`parallel${i}`]: String(i) } })),
      t.api('PUT', '/api/v2/grouptree', { token: t.adminToken, body: { changes: [{ action: 'rename', data: { node_id: id, title: 'busy-renamed' } }] } }),
    ]);
    expect(answers.map((a) => a.status)).toEqual(Array(11).fill(200));
    const after = (await read(id)).body;
    expect(Object.keys(after.custom).sort()).toEqual(Array.from({ length: 10 }, (_, i) => `parallel${i}`).sort());
    expect(after.device_name).toBe('busy-renamed');
  });

  it('renames the device in the tree when device_name changes', async () => {
    const id = await t.addDevice({ name: 'old-name' });
    await patch(id, { device_name: 'new-name' });
    const node = await t.api('GET', `/api/v2/node/${id}`, { token: t.adminToken });
    expect(node.body.title).toBe('new-name');
    // Clearing the name falls back to the host name.
    await patch(id, { device_name: '' });
    expect((await t.api('GET', `/api/v2/node/${id}`, { token: t.adminToken })).body.title).toBe('old-name');
  });

  it('writes the change to the audit trail with the device', async () => {
    const id = await t.addDevice();
    await patch(id, { description: 'audited' });
    const log = await t.api('GET', `/api/v2/commitlist?device_id=${id}`, { token: t.adminToken });
    expect(log.status).toBe(200);
    const entry = log.body.items.find((e: any) => e.event === 'device.attributes.update');
    expect(entry).toBeDefined();
    expect(entry.device_id).toBe(id);
  });

  it('answers 404 for an unknown device and 400 for a malformed id', async () => {
    expect((await patch('e'.repeat(64), { description: 'x' })).status).toBe(404);
    const r = await patch('not-a-device', { description: 'x' });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('device_id');
  });
});

describe('resource-restricted access to attributes', () => {
  it('a tag-restricted user reads and changes tagged devices only', async () => {
    const tagged = await t.addDevice({ tags: ['lab'] });
    const other = await t.addDevice({ tags: ['prod'] });
    const reader = await t.userWith([{ permission: 'device:read', resources: ['tag:lab'] }]);
    expect((await read(tagged, reader.token)).status).toBe(200);
    const denied = await read(other, reader.token);
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ code: 403, error: 'forbidden', permission: 'device:read' });
    // Reading does not allow changing.
    expect((await patch(tagged, { description: 'x' }, reader.token)).status).toBe(403);

    const manager = await t.userWith([
      { permission: 'device:read', resources: ['tag:lab'] },
      { permission: 'device:manage', resources: ['tag:lab'] },
    ]);
    expect((await patch(tagged, { description: 'by manager' }, manager.token)).status).toBe(200);
    const refused = await patch(other, { description: 'nope' }, manager.token);
    expect(refused.status).toBe(403);
    expect((await read(other)).body.description).toBe('');
  });

  it('group tags are inherited by the devices below', async () => {
    await t.addGroup({ id: 'inherit-top', tags: ['fleet-a'] });
    await t.addGroup({ id: 'inherit-mid', parent: 'inherit-top' });
    const deep = await t.addDevice({ parent: 'inherit-mid' });
    const outside = await t.addDevice();
    const reader = await t.userWith([{ permission: 'device:read', resources: ['tag:fleet-a'] }]);
    expect((await read(deep, reader.token)).status).toBe(200);
    expect((await read(outside, reader.token)).status).toBe(403);
  });

  it('node: resources cover the group and everything below it, and a device by its own id', async () => {
    await t.addGroup({ id: 'site-north' });
    await t.addGroup({ id: 'site-north-rack', parent: 'site-north' });
    await t.addGroup({ id: 'site-south' });
    const inRack = await t.addDevice({ parent: 'site-north-rack' });
    const inSouth = await t.addDevice({ parent: 'site-south' });
    const single = await t.addDevice();
    const user = await t.userWith([{ permission: 'device:read', resources: ['node:site-north', `node:${single}`] }]);
    expect((await read(inRack, user.token)).status).toBe(200);
    expect((await read(single, user.token)).status).toBe(200);
    expect((await read(inSouth, user.token)).status).toBe(403);
  });

  it('several resources are OR-ed and several roles are a union', async () => {
    const a = await t.addDevice({ tags: ['or-a'] });
    const b = await t.addDevice({ tags: ['or-b'] });
    const c = await t.addDevice({ tags: ['or-c'] });
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:or-a', 'tag:or-b'] }]);
    expect((await read(a, user.token)).status).toBe(200);
    expect((await read(b, user.token)).status).toBe(200);
    expect((await read(c, user.token)).status).toBe(403);
  });
});
