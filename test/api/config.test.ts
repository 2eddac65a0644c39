/**
 * Configuration management over the API: staged changes per user, commits (atomic, in the audit
 * trail), the rendered configuration along root → groups → tags → node, restricted users, bad input,
 * and the agent link: pushes on connect and commit, config_applied, file requests.
 */
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Mux, type Channel } from '../../shared/mux.js';
import type { FileParams } from '../../shared/protocol.js';
import { connectDevice, enrolDevice, eventually, type FakeConnection } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FROM_BROKER } from '../../shared/wire.js';

let t: TestBroker;
let devA: string; // in group ga (tag fleet), own tag edge
let devB: string; // in group gb
let restricted: string; // configuration read+manage on node:ga, device:read on node:ga
let other: string; // configuration read+manage, device:read *
let readOnly: string; // configuration:read only

const admin = () => ({ token: t.adminToken });
const change = (token: string, body: unknown) => t.api('POST', '/api/v2/change', { token, body });
const commit = (token: string, message: string, changes?: unknown[]) =>
  t.api('POST', '/api/v2/commit', { token, body: { action: 'commit', message, ...(changes ? { changes } : {}) } });
const config = (token: string, p: string) => t.api('GET', `/api/v2/${p}`, { token });

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'ga', tags: ['fleet'] });
  await t.addGroup({ id: 'gb' });
  devA = await t.addDevice({ parent: 'ga', tags: ['edge'], name: 'alpha' });
  devB = await t.addDevice({ parent: 'gb', name: 'bravo' });
  restricted = await t.tokenWith([
    { permission: 'configuration:read', resources: ['node:ga'] },
    { permission: 'configuration:manage', resources: ['node:ga'] },
    { permission: 'device:read', resources: ['node:ga'] },
  ]);
  other = await t.tokenWith([
    { permission: 'configuration:read', resources: ['*'] },
    { permission: 'configuration:manage', resources: ['*'] },
    { permission: 'device:read', resources: ['*'] },
  ]);
  readOnly = await t.tokenWith([{ permission: 'configuration:read', resources: ['*'] }]);
});
afterAll(async () => {
  await t?.close();
});

describe('changes and commits', () => {
  it('stages a change per user, previews it, commits it atomically with a sha found in the commit list', async () => {
    const c = await change(t.adminToken, {
      node_id: 'root',
      formtype: 'ntp',
      extend: false,
      config: { enabled: true, version: 'v1', servers: ['pool.ntp.org'] },
    });
    expect(c.status).toBe(200);
    expect(c.body).toMatchObject({ status: 'new', type: 'config', content: { node_id: 'root', formtype: 'ntp', extend: false } });
    expect(c.body.sha).toMatch(/^[0-9a-f]{64}$/);
    expect((await t.api('GET', `/api/v2/change/${c.body.sha}`, admin())).body.sha).toBe(c.body.sha);
    // Staged: in the preview, not in the committed configuration.
    expect((await config(t.adminToken, 'configpreview/node/root')).body.config.bundles).toContain('ntp');
    expect((await config(t.adminToken, 'config/node/root')).body.config.bundles).not.toContain('ntp');
    // Another user sees neither the change nor its preview.
    expect((await t.api('GET', `/api/v2/change/${c.body.sha}`, { token: other })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/changelist?search=${encodeURIComponent('{}')}`, { token: other })).body).toEqual([]);
    expect((await config(other, 'configpreview/node/root')).body.config.bundles).not.toContain('ntp');
    // The other user's commit does not carry the admin's change.
    expect((await commit(other, 'nothing of mine')).status).toBe(400);
    const list = await t.api('GET', `/api/v2/changelist?search=${encodeURIComponent(JSON.stringify({ status: 'new' }))}`, admin());
    expect(list.body.map((x: { sha: string }) => x.sha)).toEqual([c.body.sha]);

    const done = await commit(t.adminToken, 'ntp for everyone');
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ message: 'ntp for everyone', type: 'config', changes: [c.body.sha] });
    const sha = done.body.sha;
    expect((await config(t.adminToken, 'config/node/root')).body.config).toMatchObject({ commit_id: sha, bundles: ['ntp'] });
    expect((await t.api('GET', `/api/v2/change/${c.body.sha}`, admin())).body).toMatchObject({ status: 'committed', commit_sha: sha });
    // The change list holds staged changes unless asked for committed ones.
    expect((await t.api('GET', '/api/v2/changelist', admin())).body).toEqual([]);
    const committedList = await t.api('GET', `/api/v2/changelist?search=${encodeURIComponent('{"status":"committed"}')}`, admin());
    expect(committedList.body.map((x: { sha: string }) => x.sha)).toContain(c.body.sha);
    const got = await t.api('GET', `/api/v2/commit/${sha}`, admin());
    expect(got.body).toMatchObject({ sha, message: 'ntp for everyone', changes: [{ sha: c.body.sha, status: 'committed' }] });
    // The commit is an entry of the audit trail, with the same sha, qbee's message and changes.
    const audit = await t.api('GET', '/api/v2/commitlist?event=config.commit', admin());
    expect(audit.body.items[0]).toMatchObject({
      sha,
      message: 'ntp for everyone',
      type: 'config',
      changes: [{ sha: c.body.sha }],
      user_id: expect.any(String),
    });
    expect((await t.api('GET', '/api/v2/audit/verify', admin())).body.ok).toBe(true);
    // Nothing left to commit; a committed change cannot be discarded.
    expect((await commit(t.adminToken, 'again')).body.error).toBe('nothing_to_commit');
    expect((await t.api('DELETE', `/api/v2/change/${c.body.sha}`, admin())).status).toBe(409);
  });

  it('discards one or all staged changes, only the caller’s', async () => {
    const a = await change(other, { tag: 'edge', formtype: 'settings', config: { agentinterval: 7 } });
    const b = await change(other, { node_id: 'gb', formtype: 'settings', config: { agentinterval: 8 } });
    const mine = await change(t.adminToken, { node_id: 'gb', formtype: 'proc_watch', config: { processes: [] } });
    expect((await t.api('DELETE', `/api/v2/change/${mine.body.sha}`, { token: other })).status).toBe(404);
    expect((await t.api('DELETE', `/api/v2/change/${a.body.sha}`, { token: other })).status).toBe(204);
    expect((await t.api('GET', `/api/v2/change/${a.body.sha}`, { token: other })).status).toBe(404);
    expect((await t.api('DELETE', '/api/v2/changes', { token: other })).status).toBe(204);
    expect((await t.api('GET', `/api/v2/change/${b.body.sha}`, { token: other })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/change/${mine.body.sha}`, admin())).status).toBe(200);
    expect((await t.api('DELETE', '/api/v2/changes', admin())).status).toBe(204);
  });

  it('a commit may carry its changes inline (terraform’s one-call commit); a bad one commits nothing', async () => {
    const bad = await commit(t.adminToken, 'half', [
      { node_id: 'gb', formtype: 'settings', extend: false, config: { agentinterval: 3 } },
      { node_id: 'gb', formtype: 'nonsense', extend: false, config: {} },
    ]);
    expect(bad.status).toBe(400);
    expect(bad.body.message).toContain('changes[1]');
    expect((await t.api('GET', '/api/v2/changelist', admin())).body.filter((c: { status: string }) => c.status === 'new')).toEqual([]);
    const ok = await commit(t.adminToken, 'inline', [{ node_id: 'gb', formtype: 'settings', extend: false, config: { enabled: true, agentinterval: 3 } }]);
    expect(ok.status).toBe(200);
    expect((await config(t.adminToken, 'config/node/gb?scope=own')).body.config.bundle_data.settings).toMatchObject({ agentinterval: 3 });
  });
});

describe('rendering', () => {
  it('merges along root → groups → tags (own and inherited) → device, extend vs replace, and reset_to_group', async () => {
    const r = await commit(t.adminToken, 'layers', [
      {
        node_id: 'root',
        formtype: 'parameters',
        extend: false,
        config: {
          parameters: [
            { key: 'site', value: 'root' },
            { key: 'keep', value: 'yes' },
          ],
        },
      },
      { node_id: 'ga', formtype: 'parameters', extend: true, config: { parameters: [{ key: 'site', value: 'ga' }] } },
      { tag: 'fleet', formtype: 'package_management', extend: false, config: { items: [{ name: 'curl' }], reboot_mode: 'never' } },
      { tag: 'edge', formtype: 'package_management', extend: true, config: { items: [{ name: 'jq' }] } },
      { node_id: devA, formtype: 'ntp', extend: false, config: { servers: ['device.ntp'] } },
    ]);
    expect(r.status).toBe(200);
    const all = (await config(t.adminToken, `config/node/${devA}`)).body.config;
    expect(all.bundle_data.parameters).toMatchObject({
      parameters: [
        { key: 'site', value: 'ga' },
        { key: 'keep', value: 'yes' },
      ],
      inherited: true,
      inherits: { root: expect.any(String), ga: expect.any(String), [devA]: 'alpha' },
    });
    expect(all.bundle_data.package_management.items).toEqual([{ name: 'curl' }, { name: 'jq' }]);
    expect(all.bundle_data.package_management.inherited_from.map((s: { type: string; id: string }) => `${s.type}:${s.id}`)).toEqual(['tag:fleet', 'tag:edge']);
    expect(all.bundle_data.ntp).toMatchObject({ servers: ['device.ntp'], inherited: false });
    // The same through the spec's device path; own scope shows the device's own bundle only.
    expect((await config(t.adminToken, `config/${devA}`)).body.config.bundle_data.parameters.parameters).toHaveLength(2);
    expect((await config(t.adminToken, `config/node/${devA}?scope=own`)).body.config.bundles).toEqual(['ntp']);
    // devB is outside ga and carries neither tag.
    const b = (await config(t.adminToken, `config/node/${devB}`)).body.config;
    expect(b.bundle_data.parameters.parameters).toEqual([
      { key: 'site', value: 'root' },
      { key: 'keep', value: 'yes' },
    ]);
    expect(b.bundles).not.toContain('package_management');

    // reset_to_group drops the device's own bundle: staged in the preview, then committed.
    await change(t.adminToken, { node_id: devA, formtype: 'ntp', extend: false, config: { reset_to_group: true } });
    expect((await config(t.adminToken, `configpreview/${devA}`)).body.config.bundle_data.ntp.servers).toEqual(['pool.ntp.org']);
    expect((await config(t.adminToken, `config/${devA}`)).body.config.bundle_data.ntp.servers).toEqual(['device.ntp']);
    await commit(t.adminToken, 'reset');
    expect((await config(t.adminToken, `config/${devA}`)).body.config.bundle_data.ntp).toMatchObject({ servers: ['pool.ntp.org'], inherited: true });
    // Replace (extend false) on the group drops what root gave.
    await commit(t.adminToken, 'replace', [{ node_id: 'ga', formtype: 'parameters', extend: false, config: { parameters: [{ key: 'only', value: 'ga' }] } }]);
    expect((await config(t.adminToken, `config/${devA}`)).body.config.bundle_data.parameters.parameters).toEqual([{ key: 'only', value: 'ga' }]);
  });

  it('never answers secrets in clear; a reference sent back keeps the value', async () => {
    const c = await change(t.adminToken, { tag: 'vault', formtype: 'parameters', config: { secrets: [{ key: 'pw', value: 'hunter2-secret' }] } });
    expect(JSON.stringify(c.body)).not.toContain('hunter2-secret');
    const ref = c.body.content.config.secrets[0].value as string;
    expect(ref).toMatch(/^secret-ref:/);
    expect(JSON.stringify((await t.api('GET', '/api/v2/changelist', admin())).body)).not.toContain('hunter2-secret');
    await commit(t.adminToken, 'secret');
    const shown = await config(t.adminToken, 'config/tag/vault');
    expect(JSON.stringify(shown.body)).not.toContain('hunter2-secret');
    // The reference is bound to where the value is stored (here: the commit, no longer the staged change).
    const committedRef = shown.body.config.bundle_data.parameters.secrets[0].value as string;
    expect(committedRef).toMatch(/^secret-ref:/);
    expect(committedRef).not.toBe(ref);
    expect((await config(t.adminToken, 'config/tag/vault')).body.config.bundle_data.parameters.secrets[0].value).toBe(committedRef);
    // Sending back what was read keeps the secret; an unknown reference is refused.
    expect(
      (await commit(t.adminToken, 'same', [{ tag: 'vault', formtype: 'parameters', config: { secrets: [{ key: 'pw', value: committedRef }] } }])).status,
    ).toBe(200);
    const stored = await t.broker.services.store.db.selectFrom('config_entities').select('data').where('entity_id', '=', 'vault').executeTakeFirstOrThrow();
    expect(stored.data).toContain('hunter2-secret');
    const forged = await change(t.adminToken, {
      tag: 'vault',
      formtype: 'parameters',
      config: { secrets: [{ key: 'pw', value: 'secret-ref:00000000000000000000000000000000' }] },
    });
    expect(forged.status).toBe(400);
    // A refused change is audited with its body, secrets redacted.
    const refused = await change(t.adminToken, {
      tag: 'vault',
      formtype: 'parameters',
      config: { secrets: [{ key: 'pw', value: 'hunter3-secret' }], typo: 1 },
    });
    expect(refused.status).toBe(400);
    const trail = JSON.stringify((await t.api('GET', '/api/v2/commitlist?items_per_page=1000', admin())).body);
    expect(trail).toContain('config.typo');
    expect(trail).not.toContain('hunter2-secret');
    expect(trail).not.toContain('hunter3-secret');
  });
});

describe('removed nodes', () => {
  it('a removed group keeps no configuration; a staged change on it names itself when it blocks a commit', async () => {
    const tree = (changes: unknown[]) => t.api('PUT', '/api/v2/grouptree', { ...admin(), body: { changes } });
    expect((await tree([{ action: 'create', data: { node_id: 'gone', title: 'Gone', parent_id: 'root' } }])).status).toBe(200);
    expect((await commit(t.adminToken, 'on gone', [{ node_id: 'gone', formtype: 'ntp', config: { servers: ['old'] } }])).status).toBe(200);
    await change(t.adminToken, { node_id: 'gone', formtype: 'settings', config: { agentinterval: 1 } });
    expect((await tree([{ action: 'delete', data: { node_id: 'gone' } }])).status).toBe(200);
    const blocked = await commit(t.adminToken, 'blocked');
    expect(blocked.status).toBe(404);
    expect(blocked.body.message).toContain('DELETE /change/');
    await t.api('DELETE', '/api/v2/changes', admin());
    // What the periodic look runs after the tree changed.
    await t.broker.services.configuration.propagate();
    expect((await tree([{ action: 'create', data: { node_id: 'gone', title: 'Again', parent_id: 'root' } }])).status).toBe(200);
    expect((await config(t.adminToken, 'config/node/gone?scope=own')).body.config.bundles).toEqual([]);
  });
});

describe('who may', () => {
  it('a user restricted to group ga reads and changes ga and its devices only', async () => {
    expect((await config(restricted, `config/${devA}`)).status).toBe(200);
    expect((await config(restricted, 'config/node/ga')).status).toBe(200);
    for (const p of [`config/${devB}`, 'config/node/gb', 'config/node/root', 'config/tag/edge', `configpreview/${devB}`, 'configpreview/node/root?scope=own']) {
      const r = await config(restricted, p);
      expect(r.status, p).toBe(403);
    }
    expect((await change(restricted, { node_id: devA, formtype: 'ntp', config: { servers: ['mine'] } })).status).toBe(200);
    for (const target of [{ node_id: devB }, { node_id: 'root' }, { node_id: 'gb' }, { tag: 'edge' }, { tag: 'fleet' }]) {
      const r = await change(restricted, { ...target, formtype: 'ntp', config: { servers: ['x'] } });
      expect(r.status, JSON.stringify(target)).toBe(403);
    }
    // Inline changes outside the grant refuse the whole commit.
    expect((await commit(restricted, 'sneak', [{ node_id: 'root', formtype: 'ntp', config: { servers: ['x'] } }])).status).toBe(403);
    expect((await t.api('GET', '/api/v2/changelist', { token: restricted })).body).toHaveLength(1);
    const done = await commit(restricted, 'mine');
    expect(done.status).toBe(200);
    // Reading a commit leaves out changes on entities the reader does not reach.
    const layered = (await t.api('GET', '/api/v2/commitlist?event=config.commit', admin())).body.items.find((e: { message: string }) => e.message === 'layers');
    const seen = await t.api('GET', `/api/v2/commit/${layered.sha}`, { token: restricted });
    expect(seen.body.changes.map((c: { content: { node_id?: string; tag?: string } }) => c.content.node_id ?? `tag:${c.content.tag}`)).toEqual(['ga', devA]);
  });

  it('read-only users cannot change; unknown callers get 401', async () => {
    expect((await change(readOnly, { node_id: 'root', formtype: 'ntp', config: {} })).status).toBe(403);
    expect((await commit(readOnly, 'x')).status).toBe(403);
    expect((await t.api('DELETE', '/api/v2/changes', { token: readOnly })).status).toBe(403);
    expect((await config(readOnly, 'config/node/root')).status).toBe(200);
    expect((await t.api('GET', '/api/v2/changelist')).status).toBe(401);
  });

  it('refuses malformed and oversized input with a clear 400 and changes nothing', async () => {
    const cases: [unknown, string][] = [
      [{ node_id: 'root', tag: 'x', formtype: 'ntp', config: {} }, 'node_id'],
      [{ formtype: 'ntp', config: {} }, 'node_id'],
      [{ node_id: 'root', formtype: 'nope', config: {} }, 'formtype'],
      [{ node_id: 'root', formtype: 'settings', config: { agentintervall: 1 } }, 'config.agentintervall'],
      [{ node_id: 'root', formtype: 'settings', config: 'x' }, 'config'],
      [{ node_id: 'root', formtype: 'ntp', config: { servers: ['x'.repeat(300 * 1024)] } }, 'config'],
      [{ node_id: 'root', formtype: 'ntp', config: {}, surprise: 1 }, 'surprise'],
      [{ tag: 'bad tag!', formtype: 'ntp', config: {} }, 'tag'],
      [{ node_id: 'root', formtype: 'file_distribution', config: { files: [{ templates: [{ source: 7 }] }] } }, 'config.files[0].templates[0].source'],
    ];
    for (const [body, field] of cases) {
      const r = await change(t.adminToken, body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(JSON.stringify(r.body), field).toContain(field);
    }
    expect((await change(t.adminToken, { node_id: 'no-such-node', formtype: 'ntp', config: {} })).status).toBe(404);
    expect((await t.api('GET', '/api/v2/change/not-a-sha', admin())).status).toBe(400);
    expect((await t.api('GET', `/api/v2/commit/${'0'.repeat(64)}`, admin())).status).toBe(404);
    expect((await t.api('GET', `/api/v2/changelist?search=${encodeURIComponent('{"colour":"red"}')}`, admin())).status).toBe(400);
    expect((await t.api('GET', '/api/v2/changelist?search=nope', admin())).status).toBe(400);
    expect((await t.api('GET', '/api/v2/changelist?created_start=yesterday', admin())).status).toBe(400);
    expect((await t.api('GET', '/api/v2/changelist?limit=10001', admin())).status).toBe(400);
    expect((await config(t.adminToken, 'config/node/no-such-node')).status).toBe(404);
    expect((await config(t.adminToken, 'config/group/root')).status).toBe(400);
    expect((await config(t.adminToken, 'config/node/root?scope=mine')).status).toBe(400);
    expect((await config(t.adminToken, `config/${'a'.repeat(64)}`)).status).toBe(404);
    expect((await t.api('POST', '/api/v2/commit', { ...admin(), body: { message: '' } })).status).toBe(400);
    expect(
      (
        await t.api('POST', '/api/v2/commit', {
          ...admin(),
          body: { message: 'x', changes: Array.from({ length: 101 }, () => ({ node_id: 'root', formtype: 'ntp', config: {} })) },
        })
      ).status,
    ).toBe(400);
    expect((await t.api('GET', '/api/v2/changelist', admin())).body.filter((c: { status: string }) => c.status === 'new')).toEqual([]);
  });
});

describe('agents', () => {
  let conn: FakeConnection;
  let deviceId: string;
  const opened: { params: FileParams; data: Buffer }[] = [];

  beforeAll(async () => {
    await t.addGroup({ id: 'gc', tags: ['cfg'] });
    const key = await t.api('POST', '/api/v2/bootstrapkey', { ...admin(), body: { group_id: 'gc', auto_accept: true } });
    const { device } = await enrolDevice(t, Object.keys(key.body)[0], undefined, 'charlie');
    deviceId = device.id;
    await t.api('PATCH', `/api/v2/deviceattribute/${deviceId}`, { ...admin(), body: { custom: { site: 'oslo-1' } } });
    await t.api('POST', '/api/v2/file', { ...admin(), body: form('/', 'motd.tpl', 'hello {{site}}\n') });
    await t.api('POST', '/api/v2/file', { ...admin(), body: form('/', 'private.txt', 'not for you\n') });
    conn = await connectDevice(t.url, device);
    // The agent side of the channels: what the broker sends on `file` channels.
    new Mux(conn.ws, {
      receives: FROM_BROKER,
      onOpen: async (channel: Channel) => {
        const chunks: Buffer[] = [];
        channel.on('data', (c: Buffer) => chunks.push(c));
        channel.on('end', () => opened.push({ params: channel.params as FileParams, data: Buffer.concat(chunks) }));
        return {};
      },
    });
  });
  afterAll(() => conn?.ws.close());

  const configs = () =>
    conn.messages.filter((m) => m.t === 'config') as {
      t: 'config';
      config: { commit_id: string; bundles: string[]; bundle_data: Record<string, any> };
      attributes: Record<string, string>;
    }[];

  it('gets its configuration on connect, and again on a commit that changes it', async () => {
    const first = await eventually(() => configs()[0]);
    expect(first.attributes).toEqual({ site: 'oslo-1' });
    expect(first.config.bundles).toContain('ntp'); // from root
    const before = configs().length;
    // A commit elsewhere that leaves this device's configuration as it was pushes nothing to it.
    await commit(t.adminToken, 'elsewhere', [{ node_id: 'gb', formtype: 'proc_watch', config: { processes: [] } }]);
    const r = await commit(t.adminToken, 'motd', [
      {
        tag: 'cfg',
        formtype: 'file_distribution',
        extend: false,
        config: {
          files: [{ templates: [{ source: '/motd.tpl', destination: '/etc/motd', is_template: true }], parameters: [{ key: 'site', value: '{{site}}' }] }],
        },
      },
      { node_id: 'gc', formtype: 'parameters', extend: false, config: { secrets: [{ key: 'token', value: 'agent-needs-this' }] } },
    ]);
    const pushed = await eventually(() => configs().find((m) => m.config.commit_id === r.body.sha));
    // Messages arrive in order: had the first commit pushed anything, it would be counted here.
    expect(configs().length).toBe(before + 1);
    expect(pushed.config.bundles).toEqual(expect.arrayContaining(['file_distribution', 'parameters', 'ntp']));
    expect(pushed.config.bundle_data.file_distribution.files[0].templates[0].source).toBe('/motd.tpl');
    // The agent needs the secret itself; it travels only on the device's own authenticated connection.
    expect(pushed.config.bundle_data.parameters.secrets[0].value).toBe('agent-needs-this');
    expect(pushed.config.bundle_data.file_distribution.inherited_from).toBeUndefined();
  });

  it('config_applied sets device_commit_sha and config_propagated in the tree; malformed ones are dropped', async () => {
    const sha = configs().at(-1)!.config.commit_id;
    const node = async () => {
      const tree = (await t.api('GET', '/api/v2/grouptree', admin())).body.tree;
      const gc = tree.nodes.find((n: { node_id: string }) => n.node_id === 'gc');
      return gc.nodes.find((n: { node_id: string }) => n.node_id === deviceId);
    };
    expect(await node()).toMatchObject({ device_commit_sha: '', config_propagated: false });
    conn.send({ t: 'config_applied', commit_id: { evil: true }, reports: [] });
    conn.send({ t: 'config_applied', commit_id: 'x'.repeat(500), reports: [] });
    conn.send({
      t: 'config_applied',
      commit_id: sha,
      reports: [
        { bundle: 'file_distribution', bundle_commit_id: sha, commit_id: sha, labels: '', sev: 'INFO', text: 'ok', ts: 1, extra: 'dropped' },
        { bundle: 5 },
      ],
    });
    await eventually(async () => (await node()).config_propagated === true);
    expect((await node()).device_commit_sha).toBe(sha);
    // An agent that applied an older commit gets the current one again.
    const count = configs().length;
    conn.send({ t: 'config_applied', commit_id: 'f'.repeat(64), reports: [] });
    await eventually(() => configs().length > count);
    expect((await node()).config_propagated).toBe(false);
  });

  it('attribute changes reach the agent without a commit; an unchanged configuration is not sent again', async () => {
    const count = configs().length;
    await t.api('PATCH', `/api/v2/deviceattribute/${deviceId}`, { ...admin(), body: { custom: { site: 'bergen-2' } } });
    // What the periodic look (watch) runs once the API changed something.
    expect(await t.broker.services.configuration.propagate()).toBe(1);
    const latest = await eventually(() => configs().length > count && configs().at(-1));
    expect(latest.attributes).toEqual({ site: 'bergen-2' });
    expect(await t.broker.services.configuration.propagate()).toBe(0);
  });

  it("carries the account's default agent interval; a change of it reaches the agent without a commit, and only a company manager makes one", async () => {
    const before = configs().at(-1) as unknown as { defaults?: { agent_interval?: number } };
    expect(before.defaults).toEqual({ agent_interval: 5 });
    const company = (await t.api('GET', '/api/v2/company', admin())).body as { id: string };
    // A reader of the company record cannot change what every agent runs.
    const reader = await t.userWith([{ permission: 'company:read' }]);
    const refused = await t.api('PATCH', `/api/v2/company/${company.id}`, { token: reader.token, body: { settings: { agent_interval: 1 } } });
    expect(refused.status).toBe(403);
    expect((await t.api('PATCH', `/api/v2/company/${company.id}`, { ...admin(), body: { settings: { agent_interval: 0 } } })).status).toBe(400);
    expect(await t.broker.services.configuration.propagate()).toBe(0);

    const count = configs().length;
    expect((await t.api('PATCH', `/api/v2/company/${company.id}`, { ...admin(), body: { settings: { agent_interval: 30 } } })).status).toBe(200);
    // What the periodic look (watch) runs once the API changed something: every device gets it.
    expect(await t.broker.services.configuration.propagate()).toBeGreaterThanOrEqual(1);
    const latest = (await eventually(() => configs().length > count && configs().at(-1))) as unknown as { defaults?: { agent_interval?: number } };
    expect(latest.defaults).toEqual({ agent_interval: 30 });
    expect(await t.broker.services.configuration.propagate()).toBe(0);
  });

  it('sends files its configuration names, on a file channel; refuses any other file', async () => {
    conn.send({ t: 'file_request', id: 'r1', path: '/motd.tpl' });
    const got = await eventually(() => opened.find((o) => o.params.id === 'r1'));
    expect(got.data.toString()).toBe('hello {{site}}\n');
    expect(got.params).toMatchObject({ path: '/motd.tpl', size: 15, sha256: crypto.createHash('sha256').update('hello {{site}}\n').digest('hex') });
    conn.send({ t: 'file_request', id: 'r2', path: '/private.txt' });
    conn.send({ t: 'file_request', id: 'r3', path: '/../private.txt' });
    conn.send({ t: 'file_request', id: 'r4', path: { no: 1 } });
    await eventually(() => conn.messages.filter((m) => m.t === 'file_refused').length >= 3);
    expect(
      conn.messages
        .filter((m) => m.t === 'file_refused')
        .map((m) => m.id)
        .sort(),
    ).toEqual(['r2', 'r3', 'r4']);
    expect(opened.map((o) => o.params.id)).toEqual(['r1']);
  });

  it("the manifest carries the sha256 of each distributed file (not a client's), and a new upload of it reaches the agent without a commit", async () => {
    const sha = (text: string) => crypto.createHash('sha256').update(text).digest('hex');
    const templates = () => configs().at(-1)!.config.bundle_data.file_distribution.files[0].templates;
    expect(templates()[0].digest).toBe(sha('hello {{site}}\n'));
    // a digest sent in a change is not the broker's: dropped, the store's own put in its place
    const r = await commit(t.adminToken, 'claimed digest', [
      {
        tag: 'cfg',
        formtype: 'file_distribution',
        extend: false,
        config: {
          files: [
            {
              templates: [
                { source: '/motd.tpl', destination: '/etc/motd', is_template: true, digest: sha('forged') },
                { source: '/gone.bin', destination: '/opt/gone.bin', digest: sha('forged') },
              ],
            },
          ],
        },
      },
    ]);
    await eventually(() => configs().find((m) => m.config.commit_id === r.body.sha));
    expect(templates()).toEqual([
      { source: '/motd.tpl', destination: '/etc/motd', is_template: true, digest: sha('hello {{site}}\n') },
      { source: '/gone.bin', destination: '/opt/gone.bin' },
    ]);
    const count = configs().length;
    const f = form('/', 'motd.tpl', 'hello again {{site}}\n');
    f.append('replace', 'true');
    expect((await t.api('POST', '/api/v2/file', { ...admin(), body: f })).status).toBe(200);
    expect(await t.broker.services.configuration.propagate()).toBe(1);
    await eventually(() => configs().length > count);
    expect(templates()[0].digest).toBe(sha('hello again {{site}}\n'));
    expect(configs().at(-1)!.config.commit_id).toBe(r.body.sha);
  });
});

function form(folder: string, name: string, content: string): FormData {
  const f = new FormData();
  f.append('path', folder);
  f.append('file', new Blob([content]), name);
  return f;
}
