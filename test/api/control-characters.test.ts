/**
 * Names and titles end up on other people's terminals (`fleet devices`), screens and the audit trail:
 * control characters (C0, DEL, C1) and bidirectional formatting characters are refused in every one
 * of them; multi-line text (descriptions) may hold tab and newline only. Custom attribute values
 * reach the configuration's templates and commands on the device: they are one line of text.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_ENROL_PATH } from '../../shared/protocol.js';
import { makeDevice } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let device: string;

/** ESC (a terminal escape), NUL, DEL, CSI (C1) and NEL (C1 newline). */
const BAD = ['evil\u001b]0;pwned\u0007\u001b[2J', 'nul\u0000', 'del\u007f', 'csi\u009b2J', 'nel\u0085'];
/** Bidirectional formatting characters: an override, an isolate, the marks (U+200E, U+200F, U+061C). */
const BIDI = ['evil\u202egnp.exe', 'iso\u2066late\u2069', 'lrm\u200e', 'rlm\u200f', 'alm\u061c', 'lre\u202a'];

beforeAll(async () => {
  t = await startTestBroker();
  device = await t.addDevice({ name: 'plain' });
  await t.addGroup({ id: 'cc-group', title: 'CC' });
});
afterAll(async () => {
  await t?.close();
});

async function expectRefused(method: string, path: string, body: unknown, field: string) {
  const r = await t.api(method, path, { token: t.adminToken, body });
  expect(r.status, `${method} ${path} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`).toBe(400);
  expect(r.body.field, JSON.stringify(body)).toBe(field);
  expect(r.body.message).toMatch(/control characters/);
}

describe('control characters in names and titles', () => {
  it('refuses them in device attributes: one-line fields, custom keys and values', async () => {
    for (const bad of BAD) {
      for (const field of ['device_name', 'country', 'city', 'zip', 'address'])
        await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { [field]: bad }, field);
      await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { description: bad }, 'description');
      await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { [bad]: 'v' } }, `custom.${bad}`);
      await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { k: bad } }, 'custom.k');
    }
    for (const bad of BIDI) {
      for (const field of ['device_name', 'country', 'city', 'zip', 'address', 'description'])
        await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { [field]: bad }, field);
      await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { [bad]: 'v' } }, `custom.${bad}`);
      await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { k: bad } }, 'custom.k');
    }
    await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { 'tab\tkey': 'v' } }, 'custom.tab\tkey');
    await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { device_name: 'two\nlines' }, 'device_name');
    // Custom values are one line: they reach templates and commands on the device.
    await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { note: 'a\nb' } }, 'custom.note');
    await expectRefused('PATCH', `/api/v2/deviceattribute/${device}`, { custom: { note: 'a\tb' } }, 'custom.note');
    // Multi-line text keeps tab and newline.
    const ok = await t.api('PATCH', `/api/v2/deviceattribute/${device}`, {
      token: t.adminToken,
      body: { description: 'line one\n\tline two', custom: { note: 'a b c' } },
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ description: 'line one\n\tline two', custom: { note: 'a b c' } });
    const tree = await t.api('GET', `/api/v2/node/${device}`, { token: t.adminToken });
    expect(tree.body.title).toBe('plain');
  });

  it('refuses them in group titles (create and rename)', async () => {
    for (const bad of BAD) {
      const create = await t.api('PUT', '/api/v2/grouptree', {
        token: t.adminToken,
        body: { changes: [{ action: 'create', data: { title: bad, parent_id: 'root' } }] },
      });
      expect(create.status, JSON.stringify(bad)).toBe(400);
      expect(create.body.message).toMatch(/control characters/);
      const rename = await t.api('PUT', '/api/v2/grouptree', {
        token: t.adminToken,
        body: { changes: [{ action: 'rename', data: { node_id: 'cc-group', title: bad } }] },
      });
      expect(rename.status, JSON.stringify(bad)).toBe(400);
    }
    const node = await t.api('GET', '/api/v2/node/cc-group', { token: t.adminToken });
    expect(node.body.title).toBe('CC');
  });

  it('refuses them in tags, role names and descriptions, user and profile names, port preset names', async () => {
    for (const bad of BAD) {
      const tags = await t.api('PATCH', `/api/v2/grouptree/cc-group`, { token: t.adminToken, body: { tags: [bad] } });
      expect(tags.status).toBe(400);
      await expectRefused('POST', '/api/v2/role', { name: bad, policies: [] }, 'name');
      await expectRefused('POST', '/api/v2/role', { name: 'Fine', description: bad, policies: [] }, 'description');
      await expectRefused('POST', '/api/v2/user', { fname: bad, lname: 'L', email: 'cc@example.com', roles: [] }, 'fname');
      await expectRefused('POST', '/api/v2/user', { fname: 'F', lname: bad, email: 'cc@example.com', roles: [] }, 'lname');
      await expectRefused('PATCH', '/api/v2/profile', { fname: bad }, 'fname');
      await expectRefused('PATCH', '/api/v2/profile', { lname: bad }, 'lname');
      await expectRefused('POST', '/api/v2/service-connect/portmap', { target: '*', name: bad, port: 22 }, 'name');
    }
  });

  it('refuses them, and bidi formatting characters, in commit messages and group titles', async () => {
    for (const bad of [...BAD, ...BIDI, 'two\nlines']) {
      await expectRefused('POST', '/api/v2/commit', { action: 'commit', message: bad }, 'message');
      const create = await t.api('PUT', '/api/v2/grouptree', {
        token: t.adminToken,
        body: { changes: [{ action: 'create', data: { title: bad, parent_id: 'root' } }] },
      });
      expect(create.status, JSON.stringify(bad)).toBe(400);
    }
    for (const bad of BIDI) {
      await expectRefused('POST', '/api/v2/role', { name: bad, policies: [] }, 'name');
      await expectRefused('POST', '/api/v2/role', { name: 'Fine', description: bad, policies: [] }, 'description');
      await expectRefused('PATCH', '/api/v2/profile', { fname: bad }, 'fname');
      await expectRefused('POST', '/api/v2/service-connect/portmap', { target: '*', name: bad, port: 22 }, 'name');
      await expectRefused('POST', '/api/v2/user', { fname: 'F', lname: 'L', email: `${bad}@example.com`, roles: [] }, 'email');
    }
  });

  it('refuses them in the host name an agent enrols with (its first title)', async () => {
    const key = Object.keys((await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: {} })).body)[0];
    for (const bad of BAD) {
      const r = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: key, public_key: makeDevice().publicKeyPem, hostname: bad } });
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body.field).toBe('hostname');
    }
  });
});

describe('device:manage writes metadata, never a line of a command or a template', () => {
  it('a user holding device:read and device:manage on one device cannot store a value with a newline or a control character', async () => {
    const target = await t.addDevice({ name: 'berlin-1' });
    const manager = await t.tokenWith([
      { permission: 'device:read', resources: [`node:${target}`] },
      { permission: 'device:manage', resources: [`node:${target}`] },
    ]);
    const set = (custom: Record<string, string>) => t.api('PATCH', `/api/v2/deviceattribute/${target}`, { token: manager, body: { custom } });
    expect((await set({ location: 'berlin', svc: 'app' })).status).toBe(200);
    const before = (await t.api('GET', `/api/v2/deviceattribute/${target}`, { token: manager })).body;
    for (const value of ['app\nALL ALL=(ALL) NOPASSWD: ALL', 'berlin\r\nid', 'a\u0000b', 'x\u001b[2J', 'tab\there', 'nel\u0085', 'evil\u202e']) {
      const r = await set({ svc: value, location: 'munich' });
      expect(r.status, JSON.stringify(value)).toBe(400);
      expect(r.body).toMatchObject({ code: 400, error: 'invalid_request', field: 'custom.svc' });
      expect(r.body.message).toMatch(/one line of text/);
    }
    // nothing changed, not even the valid key sent along
    expect((await t.api('GET', `/api/v2/deviceattribute/${target}`, { token: manager })).body).toEqual(before);
    // a one-line value with shell syntax is data: stored as given (the agent passes it to commands as data)
    const shellish = await set({ location: 'berlin; id > /x/INJECTED; echo' });
    expect(shellish.status).toBe(200);
    expect(shellish.body.custom.location).toBe('berlin; id > /x/INJECTED; echo');
  });
});
