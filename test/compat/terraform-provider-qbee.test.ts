/**
 * Requests as qbee's Terraform provider (github.com/qbee-io/terraform-provider-qbee,
 * internal/qbee) sends them: its HttpClient posts JSON bodies without a Content-Type header and
 * marshals every field of its structs (no omitempty). Answers are decoded as its Go types.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { Commit, ConfigResponse, expectDecodes, type GoShape } from './go-shape.js';

let t: TestBroker;

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

/** HttpClient.Post/Put/Delete: http.NewRequest with a JSON buffer and no Content-Type, a bearer token. */
function goRequest(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const payload = body === undefined ? undefined : `${JSON.stringify(body)}\n`;
  return new Promise((resolve, reject) => {
    const req = http.request(`${t.url}/api/v2${path}`, {
      method,
      headers: { authorization: `Bearer ${t.adminToken}`, ...(payload ? { 'content-length': Buffer.byteLength(payload) } : {}) },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** grouptreeModificationData: every field, zero values included. */
const change = (action: string, data: Partial<Record<'parent_id' | 'oldParentId' | 'title' | 'node_id' | 'type', string>>) => ({
  action,
  data: { parent_id: '', oldParentId: '', title: '', node_id: '', position: 0, type: '', ...data },
});

const GrouptreeModificationResponse: GoShape = {
  struct: { sha: 'string', user_id: 'string', changes: 'string', type: 'string', message: 'string', created: 'uint64', error: { struct: {} } },
};
const GetGrouptreeResponse: GoShape = { struct: { title: 'string', node_id: 'string', type: 'string', ancestors: { slice: 'string' } } };
const ListFilesResponse: GoShape = {
  struct: {
    items: {
      slice: { struct: { name: 'string', extension: 'string', path: 'string', is_dir: 'bool', created: 'uint64', mime: 'string', size: 'uint64' } },
    },
  },
};

describe('terraform-provider-qbee', () => {
  it('GrouptreeService Create, Rename, Move, Delete and Get', async () => {
    const device = await t.addDevice({ name: 'tf-device' });
    for (const [what, body] of [
      ['create', change('create', { parent_id: 'root', title: 'TF group', node_id: 'tf-group', type: 'group' })],
      ['rename', change('rename', { parent_id: 'root', title: 'TF renamed', node_id: 'tf-group' })],
      ['move', change('move', { parent_id: 'tf-group', oldParentId: 'unassigned_group', node_id: device })],
    ] as const) {
      const r = await goRequest('PUT', '/grouptree', { changes: [body] });
      expect(r.status, `${what}: ${JSON.stringify(r.body)}`).toBe(200);
      expectDecodes(r.body, GrouptreeModificationResponse);
    }
    const got = await goRequest('GET', '/grouptree/tf-group');
    expectDecodes(got.body, GetGrouptreeResponse);
    expect(got.body).toMatchObject({ title: 'TF renamed', node_id: 'tf-group', type: 'group', ancestors: ['root', 'tf-group'] });
    expect(
      (await goRequest('PUT', '/grouptree', { changes: [change('move', { parent_id: 'unassigned_group', oldParentId: 'tf-group', node_id: device })] })).status,
    ).toBe(200);
    const del = await goRequest('PUT', '/grouptree', { changes: [change('delete', { parent_id: 'root', node_id: 'tf-group', type: 'group' })] });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
  });

  it('FilesService CreateDir, List and Delete with untyped JSON bodies', async () => {
    const created = await goRequest('POST', '/file/createdir', { path: '/', name: 'tf-dir' });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expectDecodes(created.body, { struct: { dir: 'string', path: 'string' } });
    const list = await goRequest('GET', '/files');
    expectDecodes(list.body, ListFilesResponse);
    expect(list.body.items.some((f: { path: string }) => f.path === '/tf-dir')).toBe(true);
    const del = await goRequest('DELETE', '/file', { path: '/tf-dir' });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    // Unknown fields stay refused in untyped bodies too.
    expect((await goRequest('POST', '/file/createdir', { path: '/', name: 'x', colour: 'red' })).status).toBe(400);
  });

  it('InventoryService GetDevices decodes', async () => {
    const r = await goRequest('GET', '/inventory');
    expect(r.status).toBe(200);
    expectDecodes(r.body, { struct: { items: { slice: { struct: { pub_key_digest: 'string', node_id: 'string' } } } } });
  });
});

describe('terraform-provider-qbee configuration resources (configuration_common.go)', () => {
  it('Create commits one inline change; Read finds the bundle with scope=own; Delete commits reset_to_group and the bundle is gone', async () => {
    // commitConfiguration: client.CommitConfiguration(ctx, "terraform: ...", ChangeRequest{...}) — one call, the change inline.
    const set = await t.api('POST', '/api/v2/commit', {
      token: t.adminToken,
      body: {
        action: 'commit',
        message: 'terraform: Setting connectivity_watchdog configuration for node root',
        changes: [{ node_id: 'root', formtype: 'connectivity_watchdog', extend: true, config: { enabled: true, extend: true, version: 'v1', threshold: '3' } }],
      },
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expectDecodes(set.body, Commit);
    const read = await t.api('GET', '/api/v2/config/node/root?scope=own', { token: t.adminToken });
    expectDecodes(read.body, ConfigResponse);
    expect(read.body.config).toMatchObject({ id: 'root', type: 'node' });
    expect(read.body.config.bundles).toContain('connectivity_watchdog');
    expect(read.body.config.bundle_data.connectivity_watchdog).toMatchObject({ threshold: '3', enabled: true, extend: true });
    // Delete: Metadata{Version: "v1", Reset: true} — enabled false is sent (no omitempty), extend left out.
    const reset = await t.api('POST', '/api/v2/commit', {
      token: t.adminToken,
      body: {
        action: 'commit',
        message: 'terraform: Deleting connectivity_watchdog configuration for node root',
        changes: [
          {
            node_id: 'root',
            formtype: 'connectivity_watchdog',
            extend: false,
            config: { enabled: false, version: 'v1', reset_to_group: true, threshold: '3' },
          },
        ],
      },
    });
    expect(reset.status).toBe(200);
    const after = await t.api('GET', '/api/v2/config/node/root?scope=own', { token: t.adminToken });
    expect(after.body.config.bundles).not.toContain('connectivity_watchdog');
    // Import reads tags the same way.
    const tag = await t.api('GET', '/api/v2/config/tag/prod?scope=own', { token: t.adminToken });
    expect(tag.status).toBe(200);
    expectDecodes(tag.body, ConfigResponse);
  });
});
