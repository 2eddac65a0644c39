/**
 * Requests as qbee's Terraform provider (github.com/qbee-io/terraform-provider-qbee,
 * internal/qbee) sends them: its HttpClient posts JSON bodies without a Content-Type header and
 * marshals every field of its structs (no omitempty). Answers are decoded as its Go types.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { Commit, CommitExtended, ConfigResponse, expectDecodes, expectDecodesStrictly, type GoShape } from './go-shape.js';

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

/**
 * The provider's configuration resources go through go.qbee.io/client (qbee-cli's package):
 * Client.Request encodes the body with json.NewEncoder (HTML-safe escaping, a trailing newline)
 * and sends it as application/json with a bearer token. Bodies are built in the Go structs' field
 * order: ChangeRequest {node_id,omitempty; tag,omitempty; formtype; extend; config} and
 * CommitRequest {message; changes,omitempty}; the bundle is config.Metadata (enabled; extend,
 * version, reset_to_group omitempty) followed by the bundle's fields.
 */
function goEncode(value: unknown): string {
  return `${JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}\n`;
}
function qbeeClient(method: string, path: string, src?: unknown) {
  return t.api(`${method}`, `/api/v2${path}`, {
    token: t.adminToken,
    headers: { 'user-agent': 'terraform-provider-qbee/test', ...(src === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(src === undefined ? {} : { body: goEncode(src) }),
  });
}

/** client.commitConfiguration: Metadata{Version: "v1", Enabled: true, Extend: model.Extend}, one ChangeRequest with Extend false. */
function setConfiguration(entity: { node: string } | { tag: string }, bundle: string, extend: boolean, fields: Record<string, unknown>) {
  const [kind, id] = 'node' in entity ? ['node', entity.node] : ['tag', entity.tag];
  const metadata = { enabled: true, ...(extend ? { extend: true } : {}), version: 'v1' };
  return qbeeClient('POST', '/commit', {
    message: `terraform: Setting ${bundle} configuration for ${kind} ${id}`,
    changes: [{ ...(kind === 'node' ? { node_id: id } : { tag: id }), formtype: bundle, extend: false, config: { ...metadata, ...fields } }],
  });
}

describe('terraform-provider-qbee: extend, one-change commits, qbee tags (ssh_keys_resource.go, parameters_resource.go, configuration_common.go)', () => {
  it('extend = true is taken from the bundle’s metadata, answered in Metadata.Extend and merged; extend = false replaces', async () => {
    const tag = 'tf-acc-sshkeys';
    await t.addGroup({ id: 'tf-ext' });
    const device = await t.addDevice({ parent: 'tf-ext', tags: [tag], name: 'tf-ext-dev' });
    const bob = { username: 'bob', userkeys: ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBob bob@example'] };
    const alice = { username: 'alice', userkeys: ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAlice alice@example'] };
    expect((await setConfiguration({ node: 'tf-ext' }, 'sshkeys', false, { users: [bob] })).status).toBe(200);
    const set = await setConfiguration({ tag }, 'sshkeys', true, { users: [alice] });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expectDecodesStrictly(set.body, Commit);
    // Read: GetActiveConfig(tag, own); fromBundleData sets Extend from data.Metadata.Extend.
    const read = await qbeeClient('GET', `/config/tag/${tag}?scope=own`);
    expect(read.status, JSON.stringify(read.body)).toBe(200);
    expectDecodes(read.body, ConfigResponse);
    expect(read.body.config.bundles).toEqual(['sshkeys']);
    expect(read.body.config.bundle_data.sshkeys).toMatchObject({ enabled: true, extend: true, users: [alice] });
    // The device gets the group's keys and the tag's: the tag extends.
    const rendered = await qbeeClient('GET', `/config/node/${device}`);
    expect(rendered.body.config.bundle_data.sshkeys.users.map((u: { username: string }) => u.username).sort()).toEqual(['alice', 'bob']);
    // The same resource planned with extend = false: Metadata.Extend omitted, the tag replaces.
    expect((await setConfiguration({ tag }, 'sshkeys', false, { users: [alice] })).status).toBe(200);
    expect((await qbeeClient('GET', `/config/tag/${tag}?scope=own`)).body.config.bundle_data.sshkeys.extend).toBe(false);
    const replaced = await qbeeClient('GET', `/config/node/${device}`);
    expect(replaced.body.config.bundle_data.sshkeys.users.map((u: { username: string }) => u.username)).toEqual(['alice']);
  });

  it('parameters: a commit carrying its change commits that one only (GetCommit: exactly one change); the staged change stays staged', async () => {
    // Someone (or qbee-cli) has a change staged under the same account.
    const staged = await qbeeClient('POST', '/change', {
      node_id: 'root',
      formtype: 'connectivity_watchdog',
      extend: false,
      config: { enabled: true, version: 'v1', threshold: '7' },
    });
    expect(staged.status, JSON.stringify(staged.body)).toBe(200);
    // writeParameters: config.Parameters{Metadata{Enabled, Extend, Version}, Parameters, Secrets}.
    const tag = 'tf-acc-params';
    const commit = await qbeeClient('POST', '/commit', {
      message: 'terraform: create parameters_resource',
      changes: [
        {
          tag,
          formtype: 'parameters',
          extend: false,
          config: { enabled: true, extend: true, version: 'v1', parameters: [{ key: 'k', value: 'v' }], secrets: [{ key: 's', value: 'secret-value' }] },
        },
      ],
    });
    expect(commit.status, JSON.stringify(commit.body)).toBe(200);
    expectDecodesStrictly(commit.body, Commit);
    expect(commit.body.changes).toHaveLength(1);
    const extended = await qbeeClient('GET', `/commit/${commit.body.sha}`);
    expectDecodesStrictly(extended.body, CommitExtended);
    expect(extended.body.changes).toHaveLength(1);
    const [change] = extended.body.changes;
    expect(change.content.config.secrets.map((s: { key: string }) => s.key)).toEqual(['s']);
    expect(change.content.config.extend).toBe(true);
    // The staged change is still staged, and was not committed.
    const list = await qbeeClient('GET', `/changelist?search=${encodeURIComponent('{}')}`);
    expect(list.body.map((c: { sha: string }) => c.sha)).toContain(staged.body.sha);
    const watchdog = await qbeeClient('GET', '/config/node/root?scope=own');
    expect(watchdog.body.config.bundles).not.toContain('connectivity_watchdog');
    expect((await qbeeClient('GET', `/config/tag/${tag}?scope=own`)).body.config.bundle_data.parameters.extend).toBe(true);
    expect((await qbeeClient('DELETE', `/change/${staged.body.sha}`)).status).toBe(204);
  });

  it('tags as the provider’s tests write them (integration-test:tag-1, terraform:acctest:…): group tags, configuration, resources', async () => {
    // grouptree_group_resource Create: GroupTreeUpdate (create: ParentID, NodeID, Type, Title), then GroupTreeSetTags (PATCH {tags}).
    const tags = ['integration-test:tag-1', 'integration-test:tag-2'];
    const created = await qbeeClient('PUT', '/grouptree', {
      changes: [{ action: 'create', data: { parent_id: 'root', node_id: 'tf-tagged', type: 'group', title: 'TF tagged' } }],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const set = await qbeeClient('PATCH', '/grouptree/tf-tagged', { tags });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    // Read: GroupTreeGetNode → NodeInfo.Tags.
    const node = await qbeeClient('GET', '/grouptree/tf-tagged');
    expect(node.body.tags).toEqual(tags);
    // connectivity_watchdog_resource_test: tag = "terraform:acctest:connectivitywatchdog".
    const tag = 'terraform:acctest:connectivitywatchdog';
    expect((await setConfiguration({ tag }, 'connectivity_watchdog', false, { threshold: '5' })).status).toBe(200);
    const read = await qbeeClient('GET', `/config/tag/${tag}?scope=own`);
    expect(read.status, JSON.stringify(read.body)).toBe(200);
    expectDecodes(read.body, ConfigResponse);
    expect(read.body.config).toMatchObject({ id: tag, type: 'tag', bundles: ['connectivity_watchdog'] });
    // A role naming the tag reaches the devices below the group; one naming its first part does not.
    const device = await t.addDevice({ parent: 'tf-tagged', name: 'tf-tagged-dev' });
    const reader = await t.tokenWith([{ permission: 'device:read', resources: ['tag:integration-test:tag-1'] }]);
    expect((await t.api('GET', `/api/v2/node/${device}`, { token: reader })).status).toBe(200);
    const prefix = await t.tokenWith([{ permission: 'device:read', resources: ['tag:integration-test'] }]);
    expect((await t.api('GET', `/api/v2/node/${device}`, { token: prefix })).status).toBe(403);
    // Still refused: what neither grammar allows.
    expect((await qbeeClient('PATCH', '/grouptree/tf-tagged', { tags: ['-A'] })).status).toBe(400);
    expect((await qbeeClient('POST', '/change', { tag: 'a', formtype: 'settings', extend: false, config: { enabled: true } })).status).toBe(200);
    expect((await qbeeClient('POST', '/change', { tag: 'a/b', formtype: 'settings', extend: false, config: { enabled: true } })).status).toBe(400);
    expect((await qbeeClient('DELETE', '/changes')).status).toBe(204);
  });
});
