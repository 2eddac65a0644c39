/**
 * Requests exactly as qbee-cli (github.com/qbee-io/qbee-cli, Go package `client`) sends them, and
 * its answers decoded under Go's encoding/json rules into the struct it decodes them into. Each
 * test names the Go function it mirrors. Request bodies are what json.Marshal makes of the Go
 * struct: fields without `omitempty` are sent with their zero values.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectDevice, enrolDevice, eventually, type FakeConnection } from '../support/agent.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { connectQbee } from '../support/qbee-client.js';
import { handleChannel } from '../../agent/sessions/index.js';
import type { Channel } from '../../shared/mux.js';
import { QbeeMessage } from '../../shared/qbee.js';
import {
  BootstrapKeyResponse,
  Change,
  Commit,
  CommitExtended,
  CommitsList,
  ConfigResponse,
  DeviceInventory,
  decodeProblems,
  DeviceStatus,
  expectDecodes,
  expectDecodesStrictly,
  FilesListResponse,
  FileStats,
  GroupNodes,
  GroupTree,
  InventoryListResponse,
  LoginResponse,
  MetricsSummary,
  OAuth2DeviceAuthorizationResponse as DeviceAuthorizationResponse,
  OAuth2TokenResponse,
  PendingDevices,
} from './go-shape.js';

let t: TestBroker;
const fakes = new FakeAgents();
const PUBLIC_HOST = 'fleet.example.com:8443';

beforeAll(async () => {
  t = await startTestBroker({ env: { PUBLIC_URL: `https://${PUBLIC_HOST}` }, locator: fakes.locator });
});
afterAll(async () => {
  await t?.close();
});

/** url.Values.Encode() of qbee-cli's list queries: `search` always, the rest when set. */
function query(search: Record<string, unknown>, extra: Record<string, string | number> = {}): string {
  const values = new URLSearchParams();
  for (const [k, v] of Object.entries({ ...extra, search: JSON.stringify(search) }).sort(([a], [b]) => a.localeCompare(b))) values.set(k, String(v));
  return values.toString();
}

const admin = () => ({ token: t.adminToken });

describe('bootstrap keys (bootstrapkey.go)', () => {
  it('NewBootstrapKey: POST without a body; the answer is map[key]BootstrapKey', async () => {
    const r = await t.api('POST', '/api/v2/bootstrapkey', admin());
    expect(r.status).toBe(200);
    expectDecodes(r.body, BootstrapKeyResponse);
    expect(Object.keys(r.body)).toHaveLength(1);
  });

  it('ListBootstrapKeys and GetBootstrapKey decode as maps keyed by the key', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', { ...admin(), body: { group_id: 'root', auto_accept: true } });
    const [key] = Object.keys(created.body);
    const list = await t.api('GET', '/api/v2/bootstrapkeylist', admin());
    expect(list.status).toBe(200);
    expectDecodes(list.body, BootstrapKeyResponse);
    expect(list.body[key]).toMatchObject({ group_id: 'root', auto_accept: true });
    const one = await t.api('GET', `/api/v2/bootstrapkey/${key}`, admin());
    expectDecodes(one.body, BootstrapKeyResponse);
    expect(Object.keys(one.body)).toEqual([key]);
  });

  it('UpdateBoostrapKey: PUT the whole struct, "ID" included (group_id omitted when empty)', async () => {
    const [key] = Object.keys((await t.api('POST', '/api/v2/bootstrapkey', admin())).body);
    const full = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { ID: key, group_id: 'root', auto_accept: true } });
    expect(full.status, JSON.stringify(full.body)).toBe(200);
    expect(full.body).toMatchObject({ group_id: 'root', auto_accept: true });
    const noGroup = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { ID: key, auto_accept: false } });
    expect(noGroup.body).toMatchObject({ group_id: 'root', auto_accept: false });
    // The lower-case spelling too; an ID naming another key is refused, not applied to the path's key.
    expect((await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { id: key, auto_accept: true } })).status).toBe(200);
    const other = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { ID: 'another-key', auto_accept: true } });
    expect(other.status).toBe(400);
    // A field no client sends stays refused.
    expect((await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { auto_acept: true } })).status).toBe(400);
  });
});

describe('pending hosts (pendinghost.go)', () => {
  it('GetPendingDevices decodes a JSON array, with and without ?pendingonly=1', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', { ...admin(), body: { group_id: 'root' } });
    const { device } = await enrolDevice(t, Object.keys(created.body)[0], undefined, 'pending-one.lab');
    for (const suffix of ['', '?pendingonly=1']) {
      const r = await t.api('GET', `/api/v2/pendinghost${suffix}`, admin());
      expect(r.status).toBe(200);
      expectDecodes(r.body, PendingDevices);
      const host = r.body.find((h: { pub_key_digest: string }) => h.pub_key_digest === device.id);
      expect(host).toMatchObject({ approved: false, group_id: 'root', host: 'pending-one.lab', uqhost: 'pending-one', remoteaddress: '127.0.0.1' });
      expect(Number.isInteger(host.timestamp)).toBe(true);
    }
    // ApprovePendingDevice
    expect((await t.api('POST', '/api/v2/pendinghost', { ...admin(), body: { node_id: device.id } })).status).toBe(200);
  });
});

describe('group tree (group_tree.go, groups.go)', () => {
  let group: string;
  let device: string;
  beforeAll(async () => {
    group = await t.addGroup({ id: 'cli-lab', tags: ['lab'] });
    await t.addGroup({ id: 'cli-lab-child', parent: group });
    device = await t.addDevice({ parent: group, name: 'tree-dev' });
    await t.broker.services.store.db.updateTable('devices').set({ last_seen: new Date().toISOString() }).where('device_id', '=', device).execute();
  });

  it('GroupTreeGet decodes: last_reported is an int64', async () => {
    const r = await t.api('GET', '/api/v2/grouptree', admin());
    expect(r.status).toBe(200);
    expectDecodes(r.body, GroupTree);
    const lab = r.body.tree.nodes.find((n: { node_id: string }) => n.node_id === group);
    const node = lab.nodes.find((n: { node_id: string }) => n.node_id === device);
    expect(Number.isInteger(node.last_reported)).toBe(true);
    expect(node.last_reported).toBeGreaterThan(1_600_000_000);
  });

  it('GroupTreeGet(skipUnassigned): ?skip_unassigned=true leaves unassigned_group out', async () => {
    const all = await t.api('GET', '/api/v2/grouptree', admin());
    const unassignedDevice = await t.addDevice({ name: 'loose' });
    const skipped = await t.api('GET', '/api/v2/grouptree?skip_unassigned=true', admin());
    expectDecodes(skipped.body, GroupTree);
    expect(skipped.body.tree.nodes.some((n: { node_id: string }) => n.node_id === 'unassigned_group')).toBe(false);
    expect(JSON.stringify(skipped.body)).not.toContain(unassignedDevice);
    expect(skipped.body.total_devices).toBeLessThan(all.body.total_devices + 1);
  });

  it('GroupTreeUpdate: each action with the fields GroupTreeChangeData always sends', async () => {
    const changes = [
      { action: 'create', data: { parent_id: group, node_id: 'cli-made', type: 'group', title: 'Made' } },
      { action: 'rename', data: { parent_id: '', node_id: 'cli-made', type: 'group', title: 'Renamed' } },
      { action: 'move', data: { parent_id: 'cli-made', node_id: device, type: 'device', old_parent_id: group } },
      { action: 'update', data: { parent_id: '', node_id: device, tags: ['moved'] } },
    ];
    const r = await t.api('PUT', '/api/v2/grouptree', { ...admin(), body: { changes } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const node = await t.api('GET', `/api/v2/node/${device}`, admin());
    expect(node.body).toMatchObject({ parent_id: 'cli-made', tags: ['moved'] });
    // terraform-provider-qbee also sends a position with a move.
    const back = await t.api('PUT', '/api/v2/grouptree', {
      ...admin(),
      body: { changes: [{ action: 'move', data: { parent_id: group, node_id: device, type: 'device', old_parent_id: 'cli-made', position: 0 } }] },
    });
    expect(back.status, JSON.stringify(back.body)).toBe(200);
    const del = await t.api('PUT', '/api/v2/grouptree', {
      ...admin(),
      body: { changes: [{ action: 'delete', data: { parent_id: '', node_id: 'cli-made', type: 'group' } }] },
    });
    expect(del.status).toBe(200);
  });

  it('GroupsList: a JSON array of GroupNode, filtered by parent_id and tags', async () => {
    const all = await t.api('GET', '/api/v2/groups', admin());
    expect(all.status).toBe(200);
    expectDecodes(all.body, GroupNodes);
    expect(all.body.map((g: { node_id: string }) => g.node_id)).toEqual(expect.arrayContaining(['root', 'unassigned_group', group, 'cli-lab-child']));
    const children = await t.api('GET', `/api/v2/groups?${query({ parent_id: group })}`, admin());
    expect(children.body.map((g: { node_id: string }) => g.node_id)).toEqual(['cli-lab-child']);
    expect(children.body[0]).toMatchObject({ parent_id: group, type: 'group', ancestors: ['root', group, 'cli-lab-child'] });
    const tagged = await t.api('GET', `/api/v2/groups?${query({ tags: ['lab'] })}`, admin());
    expect(tagged.body.map((g: { node_id: string }) => g.node_id)).toEqual([group]);
    // A filter this broker cannot apply is a 400, not a bigger answer.
    const unknown = await t.api('GET', `/api/v2/groups?${query({ title: 'x' })}`, admin());
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ code: 400, field: 'search', filter: 'title' });
  });
});

describe('inventory (inventory.go, runagent.go)', () => {
  let inGroup: string;
  let tagged: string;
  const report = (hostname: string, address: string) => ({
    hostname,
    os: { name: 'Debian GNU/Linux', version: '12', id: 'debian' },
    kernel: '6.1.0-test',
    arch: 'x86_64',
    cpu: { model: 'Test CPU', cores: 4 },
    network: [{ name: 'eth0', mac: '02:00:00:00:00:aa', addresses: [{ address, family: 'IPv4', cidr: `${address}/24` }] }],
    agent_version: '1.4.2',
    uptime: 100,
    collected_at: new Date().toISOString(),
  });
  beforeAll(async () => {
    await t.addGroup({ id: 'inv-group' });
    inGroup = await t.addDevice({ parent: 'inv-group', name: 'alpha-inv' });
    tagged = await t.addDevice({ tags: ['inv-tag'], name: 'bravo-inv' });
    await t.broker.services.inventory.record(inGroup, report('alpha.lab', '10.9.0.1'));
    await t.broker.services.inventory.record(tagged, report('bravo.lab', '10.9.0.2'));
  });

  const ids = (body: { items: { node_id: string }[] }) => body.items.map((i) => i.node_id);

  it('ListDeviceInventory: search is JSON, report_type short; items decode into InventoryListItem', async () => {
    const r = await t.api('GET', `/api/v2/inventory?${query({ title: 'alpha-inv' }, { report_type: 'short' })}`, admin());
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expectDecodes(r.body, InventoryListResponse);
    expect(ids(r.body)).toEqual([inGroup]);
    expect(r.body.items[0]).toMatchObject({ node_id: inGroup, uuid: inGroup, status: 'offline', system: { fqhost: 'alpha.lab', arch: 'x86_64' } });
    // An empty search (what the Go struct marshals to with no filter set) lists everything.
    const all = await t.api('GET', `/api/v2/inventory?${query({}, { items_per_page: 1000, sort_field: 'title', sort_direction: 'desc' })}`, admin());
    expectDecodes(all.body, InventoryListResponse);
    expect(ids(all.body)).toEqual(expect.arrayContaining([inGroup, tagged]));
    const titles = all.body.items.map((i: { title: string }) => i.title);
    expect(titles).toEqual([...titles].sort().reverse());
  });

  it('RunAgentGroup and RunAgentTag find exactly the devices of the group or tag', async () => {
    const byGroup = await t.api('GET', `/api/v2/inventory?${query({ ancestor_ids: ['inv-group'] })}`, admin());
    expect(ids(byGroup.body)).toEqual([inGroup]);
    const byTag = await t.api('GET', `/api/v2/inventory?${query({ tags: ['inv-tag'] })}`, admin());
    expect(ids(byTag.body)).toEqual([tagged]);
    const byIp = await t.api('GET', `/api/v2/inventory?${query({ ip: '10.9.0.2' })}`, admin());
    expect(ids(byIp.body)).toEqual([tagged]);
    const byMac = await t.api('GET', `/api/v2/inventory?${query({ mac: '02:00:00:00:00:AA', flavor: 'debian' })}`, admin());
    expect(ids(byMac.body)).toEqual(expect.arrayContaining([inGroup, tagged]));
  });

  it('refuses the filters and orders it cannot apply instead of answering more', async () => {
    for (const q of [query({ no_such_filter: 'x' }), query({}, { sort_field: 'no_such_field' }), query({ commit_sha: 5 }), 'search=%7B%22title%22%3A']) {
      const r = await t.api('GET', `/api/v2/inventory?${q}`, admin());
      expect(r.status, q).toBe(400);
      expect(r.body.code).toBe(400);
    }
  });

  it('GetDeviceInventory decodes into DeviceInventory, with the agent version in system.cf_version', async () => {
    const r = await t.api('GET', `/api/v2/inventory/${inGroup}`, admin());
    expect(r.status).toBe(200);
    expectDecodesStrictly(r.body, DeviceInventory);
    expect(r.body).toMatchObject({ device_commit_sha: '', config_propagated: false, pushed_config: { bundles: [] } });
    expect(r.body.pub_key_digest).toBe(inGroup);
    expect(r.body.system.cf_version).toBe('1.4.2');
    expect(r.body.system.ipv4).toEqual({ eth0: '10.9.0.1' });
  });

  it('a report cannot plant fields that break the client’s decoding', async () => {
    const hostile = await t.addDevice({ name: 'hostile-inv' });
    await t.broker.services.inventory.record(hostile, {
      ...report('h.lab', '10.9.0.3'),
      system: 'x',
      settings: 5,
      tags: 'x',
      last_reported: 'soon',
      attributes: [],
    });
    expectDecodes((await t.api('GET', `/api/v2/inventory/${hostile}`, admin())).body, DeviceInventory);
    expectDecodes((await t.api('GET', `/api/v2/inventory?${query({ node_id: hostile })}`, admin())).body, InventoryListResponse);
  });
});

describe('files (files.go, filemanager.go)', () => {
  const store = () => path.join(t.dataDir, 'files');
  const upload = (folder: string, name: string, content: string) => {
    const form = new FormData();
    form.append('file', new Blob([content]), name);
    form.append('path', folder);
    form.append('replace', 'false');
    return t.api('POST', '/api/v2/file', { ...admin(), body: form });
  };

  /** FileManager.SnapshotRemote: pages of 1000 with search {"name":"","path":"^<dir>/.*"}. */
  async function snapshotRemote(remotePath: string): Promise<Map<string, { path: string }>> {
    const found = new Map<string, { path: string }>();
    const searchPath = remotePath === '/' ? '^/.*' : `^${remotePath}/.*`;
    let offset = 0;
    for (;;) {
      const r = await t.api('GET', `/api/v2/files?${query({ name: '', path: searchPath }, { items_per_page: 1000, ...(offset ? { offset } : {}) })}`, admin());
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expectDecodes(r.body, FilesListResponse);
      for (const file of r.body.items) found.set(file.path, file);
      offset += 1000;
      if (offset > r.body.total) break;
    }
    return found;
  }

  it('Remove(recursive): deleting what the ^/dir/.* listing returns never touches /dirx or /other', async () => {
    // As qbee-cli sends folders: `files upload -d` path.Clean's them, `files sync` filepath.Join's
    // them, so never with a trailing "/" (only the root is "/").
    for (const [folder, name] of [
      ['/dir', 'a.txt'],
      ['/dir/sub', 'b.txt'],
      ['/dirx', 'c.txt'],
      ['/other/dir', 'd.txt'],
      ['/', 'dir.txt'],
    ]) {
      expect((await upload(folder, name, `content of ${name}`)).status).toBe(200);
    }
    const listed = await snapshotRemote('/dir');
    expect([...listed.keys()].sort()).toEqual(['/dir/a.txt', '/dir/sub', '/dir/sub/b.txt']);
    // FileManager.Remove adds the folder itself, then deletes in reverse path order (DeleteFile: JSON body {"path"}).
    const deletes = ['/dir', ...listed.keys()].sort().reverse();
    for (const p of deletes) {
      const r = await t.api('DELETE', '/api/v2/file', { ...admin(), body: { path: p } });
      expect(r.status, `${p}: ${JSON.stringify(r.body)}`).toBe(200);
    }
    expect(fs.existsSync(path.join(store(), 'dir'))).toBe(false);
    expect(fs.readFileSync(path.join(store(), 'dirx', 'c.txt'), 'utf8')).toBe('content of c.txt');
    expect(fs.readFileSync(path.join(store(), 'other', 'dir', 'd.txt'), 'utf8')).toBe('content of d.txt');
    expect(fs.existsSync(path.join(store(), 'dir.txt'))).toBe(true);
  });

  /**
   * UploadFileReplace (files.go) as Go's mime/multipart writes it: the file part first, with the
   * filename qbee-cli was given and an empty Content-Type, then `path` and `replace` as text fields.
   */
  function goUpload(folder: string, filename: string, content: string, replace: boolean) {
    const boundary = crypto.randomBytes(30).toString('hex');
    const body =
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: \r\n\r\n${content}` +
      `\r\n--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n${folder}` +
      `\r\n--${boundary}\r\nContent-Disposition: form-data; name="replace"\r\n\r\n${replace}` +
      `\r\n--${boundary}--\r\n`;
    return t.api('POST', '/api/v2/file', { ...admin(), headers: { 'content-type': `multipart/form-data; boundary=${boundary}` }, body });
  }

  it('files upload -d /newdir and files sync into a folder: the request bytes qbee-cli sends, the folder without its trailing /', async () => {
    // `files upload -s app.conf -d /newdir/`: path.Clean gives "/newdir"; FileManager.UploadFile names the part by the source path.
    const up = await goUpload('/newdir', 'app.conf', 'first', false);
    expect(up.status, JSON.stringify(up.body)).toBe(200);
    expect(up.body).toEqual({ file: 'app.conf', path: '/newdir/' });
    expect(fs.readFileSync(path.join(store(), 'newdir', 'app.conf'), 'utf8')).toBe('first');
    // `-s build/tool.bin`: the stored name is the file's own, not the folders it came from.
    const nested = await goUpload('/newdir', 'build/tool.bin', 'tool', false);
    expect(nested.status, JSON.stringify(nested.body)).toBe(200);
    expect(fs.readFileSync(path.join(store(), 'newdir', 'tool.bin'), 'utf8')).toBe('tool');
    // Without --overwrite (replace=false) an existing file stays.
    expect((await goUpload('/newdir', 'app.conf', 'second', false)).status).toBe(409);
    // `files sync -s ./site -d /synced`: FileManager.upload sends filepath.Join(dest, dir of the file) with replace=true.
    for (const [folder, name, content] of [
      ['/synced', 'index.html', 'index'],
      ['/synced/css', 'main.css', 'css'],
      ['/synced/css', 'main.css', 'css, again'],
      ['/', 'top.txt', 'top'],
    ]) {
      const r = await goUpload(folder, name, content, true);
      expect(r.status, `${folder} ${name}: ${JSON.stringify(r.body)}`).toBe(200);
    }
    expect(fs.readFileSync(path.join(store(), 'synced', 'css', 'main.css'), 'utf8')).toBe('css, again');
    expect(fs.readFileSync(path.join(store(), 'top.txt'), 'utf8')).toBe('top');
  });

  it('refuses a pattern it cannot apply exactly (400), and bounds its length', async () => {
    for (const bad of ['^/dir/(a|b)', '^/dir/.*/x', '^(a+)+$', `^/${'a'.repeat(9000)}`]) {
      const r = await t.api('GET', `/api/v2/files?${query({ name: '', path: bad })}`, admin());
      expect(r.status).toBe(400);
    }
    expect((await t.api('GET', `/api/v2/files?${query({ size: 1 })}`, admin())).status).toBe(400);
  });

  it('FileStats decodes', async () => {
    const r = await t.api('GET', '/api/v2/file/stats', admin());
    expectDecodes(r.body, FileStats);
  });
});

describe('devices (device.go, runagent.go, metrics.go)', () => {
  let device: string;
  let conn: FakeConnection;
  beforeAll(async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', { ...admin(), body: { group_id: 'root', auto_accept: true } });
    const { device: d } = await enrolDevice(t, Object.keys(created.body)[0], undefined, 'status-dev');
    device = d.id;
    conn = await connectDevice(t.url, d);
    await eventually(() => t.broker.services.agents.isConnected(device));
  });
  afterAll(() => conn?.ws.close());

  it('GetDeviceStatus: edge names this broker’s public host, edge_version 1', async () => {
    const r = await t.api('GET', `/api/v2/device/${device}/status`, admin());
    expect(r.status).toBe(200);
    expectDecodes(r.body, DeviceStatus);
    expect(r.body).toMatchObject({ uuid: device, remote_access: true, edge: PUBLIC_HOST, edge_version: 1 });
  });

  it('runAgent: GET /device/{id}/run-agent has the agent run its configuration (no restart) with the reload grant, audited', async () => {
    const other = await t.addDevice({ name: 'run-agent-dev' });
    let agent: FakeAgent | undefined;
    try {
      agent = await fakes.attach(other, t.dataDir);
      const r = await t.api('GET', `/api/v2/device/${other}/run-agent`, admin());
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(agent.reloads).toBe(1);
      expect(agent.runs).toBe(1);
      const consoleOnly = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/console'] }]);
      expect((await t.api('GET', `/api/v2/device/${other}/run-agent`, { token: consoleOnly.token })).status).toBe(403);
      const audit = await t.api('GET', `/api/v2/commitlist?device_id=${other}&action=reload`, admin());
      expect(audit.body.items.map((e: { result: string }) => e.result).sort()).toEqual(['allowed', 'denied', 'ended']); // the allowed reload's start and end, the refused one;
    } finally {
      await agent?.close();
    }
  });

  it('ConnectTerminal with a command: an agent that would open a shell instead is answered ERROR, the shell closed, audited', async () => {
    const other = await t.addDevice({ name: 'old-agent-dev' });
    let agent: FakeAgent | undefined;
    let opened: Channel | undefined;
    try {
      // An agent from before terminal commands: it ignores `command` and starts the login shell.
      agent = await fakes.attach(other, t.dataDir, (channel) => {
        delete (channel.params as { command?: string[] }).command;
        opened = channel;
        return handleChannel(channel, { stateDir: t.dataDir, log: () => {} });
      });
      const client = await connectQbee(t.url, other, t.adminToken);
      try {
        // json.Marshal(PTYCommand) for `qbee-cli term <device> uptime -p`.
        const payload = '{"sid":"","cols":120,"rows":40,"command":"uptime","command_args":["-p"]}';
        await expect(client.open(QbeeMessage.pty, payload)).rejects.toThrow(/cannot run a command in a console/);
      } finally {
        client.close();
      }
      await eventually(() => opened?.destroyed === true);
      const audit = await t.api('GET', `/api/v2/commitlist?device_id=${other}&action=console`, admin());
      const start = audit.body.items.find((e: { event: string }) => e.event === 'remote.console.start');
      expect(start.options).toMatchObject({ cols: 120, rows: 40, command: ['uptime', '-p'] });
      expect(audit.body.items.some((e: { reason?: string }) => /cannot run a command/.test(String(e.reason ?? '')))).toBe(true);
    } finally {
      await agent?.close();
    }
  });

  it('GetLatestMetrics: the newest samples of the last hour decode into MetricsSummary; metrics:read is needed', async () => {
    const now = Math.floor(Date.now() / 1000);
    conn.send({
      t: 'metrics',
      samples: [
        { label: 'cpu', ts: now - 60, values: { user: 12.5, system: 3.25, iowait: 0.5 } },
        { label: 'memory', ts: now - 60, values: { memfree: 2048000, memutil: 41, swaputil: 0 } },
        { label: 'loadavg_weighted', ts: now - 60, values: { '1min': 0.5, '5min': 0.25, '15min': 0.1 } },
        { label: 'filesystem', ts: now - 60, id: '/', values: { avail: 1234567, use: 37 } },
      ],
    });
    const r = await eventually(async () => {
      const a = await t.api('GET', `/api/v2/device/${device}/metrics/latest`, admin());
      return a.status === 200 && a.body.cpu.reported > 0 ? a : undefined;
    });
    expectDecodesStrictly(r.body, MetricsSummary);
    expect(r.body).toMatchObject({
      cpu: { reported: now - 60, user: 12.5, system: 3.25, io: 0.5 },
      // MemorySummary: used and swap_used percent, available KiB.
      memory: { reported: now - 60, used: 41, swap_used: 0, available: 2048000 },
      load: { '1min': 0.5 },
      filesystem: { mounts: [{ path: '/', used: 37, available: 1234567 }] },
    });
    const nobody = await t.tokenWith([]);
    expect((await t.api('GET', `/api/v2/device/${device}/metrics/latest`, { token: nobody })).status).toBe(403);
  });
});

describe('session (login.go, client.go)', () => {
  it('Login then RefreshToken: the PHPSESSID cookie renews the token through Refreshed-Token', async () => {
    const login = await t.api('POST', '/api/v2/login', { body: { email: ADMIN.email, password: ADMIN.password } });
    expect(login.status).toBe(200);
    expectDecodes(login.body, LoginResponse);
    // Client.Call keeps the cookie named PHPSESSID of any answer as its refresh token.
    const cookie = login.headers.getSetCookie().find((c) => c.startsWith('PHPSESSID='));
    expect(cookie).toBeDefined();
    const refreshToken = (cookie as string).split(';')[0].slice('PHPSESSID='.length);
    // Client.RefreshToken: POST, no body, no bearer, the cookie only.
    const r = await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie: `PHPSESSID=${refreshToken}` } });
    expect(r.status).toBe(200);
    const renewed = r.headers.get('Refreshed-Token');
    expect(renewed).toBeTruthy();
    expect((await t.api('GET', '/api/v2/grouptree', { token: renewed as string })).status).toBe(200);
    // A made-up cookie renews nothing.
    expect((await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie: 'PHPSESSID=forged' } })).status).toBe(401);
  });
});

describe('device authorization (login_oauth2.go)', () => {
  const FORM = { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'qbee-cli/test' };
  const GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
  /** OAuth2DeviceAuthorizationRequest: POST, form content type, no body. */
  const start = () => t.api('POST', '/oauth2/devicecode', { headers: FORM });
  /** OAuth2GetTokenForDeviceCode */
  const poll = (deviceCode: string) =>
    t.api('POST', '/oauth2/token', { headers: FORM, body: new URLSearchParams({ grant_type: GRANT, device_code: deviceCode }).toString() });

  it('InteractiveOAuth2DeviceAuthorizationFlow: pending until a signed-in user approves, then a session of that user', async () => {
    const auth = await start();
    expect(auth.status, JSON.stringify(auth.body)).toBe(200);
    expectDecodes(auth.body, DeviceAuthorizationResponse);
    expect(auth.body).toMatchObject({ verification_uri: `https://${PUBLIC_HOST}/cli-login`, expires_in: 600, interval: 5, user_agent: 'qbee-cli/test' });
    expect(auth.body.user_code).toMatch(/^[B-DF-HJ-NP-TV-XZ]{4}-[B-DF-HJ-NP-TV-XZ]{4}$/);

    const pending = await poll(auth.body.device_code);
    expect(pending.status).toBe(400);
    expect(pending.body.error).toBe('authorization_pending');

    // The console page shows where the request comes from, then approves (ApproveOAuth2DeviceAuthorization: POST, no body).
    const user = await t.userWith([{ permission: 'files:read' }]);
    const seen = await t.api('GET', `/api/v2/oauth2/device-auth/${auth.body.user_code.toLowerCase()}`, { token: user.token });
    expect(seen.body).toMatchObject({ user_code: auth.body.user_code, user_agent: 'qbee-cli/test' });
    expect((await t.api('POST', `/api/v2/oauth2/device-auth/${auth.body.user_code}`)).status).toBe(401);
    const approved = await t.api('POST', `/api/v2/oauth2/device-auth/${auth.body.user_code}`, { token: user.token });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);

    const tokens = await poll(auth.body.device_code);
    expect(tokens.status, JSON.stringify(tokens.body)).toBe(200);
    expectDecodes(tokens.body, OAuth2TokenResponse);
    expect(tokens.body.token_type).toBe('Bearer');
    // The session is the approving user's, with that user's permissions only.
    expect((await t.api('GET', '/api/v2/files', { token: tokens.body.access_token })).status).toBe(200);
    expect((await t.api('GET', '/api/v2/userlist', { token: tokens.body.access_token })).status).toBe(403);
    // Client.RefreshToken with the refresh token it got.
    const refreshed = await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie: `PHPSESSID=${tokens.body.refresh_token}` } });
    expect(refreshed.status).toBe(200);
    // The device code works once.
    expect((await poll(auth.body.device_code)).body.error).toBe('bad_verification_code');
  });

  it('DeclineOAuth2DeviceAuthorization: the polling client is told it was declined; a code is decided once', async () => {
    const auth = await start();
    const declined = await t.api('DELETE', `/api/v2/oauth2/device-auth/${auth.body.user_code}`, admin());
    expect(declined.status).toBe(200);
    expect((await t.api('POST', `/api/v2/oauth2/device-auth/${auth.body.user_code}`, admin())).status).toBe(409);
    const r = await poll(auth.body.device_code);
    expect(r.status).toBe(400);
    expect(r.body.error).toBe('authorization_declined');
    expect((await poll('made-up-device-code')).body.error).toBe('bad_verification_code');
    expect((await t.api('POST', '/api/v2/oauth2/device-auth/BCDF-GHJK', admin())).status).toBe(404);
  });
});

describe('configuration (change.go, commit.go, config.go)', () => {
  it('CreateConfigurationChange, GetConfigurationChange, ListUncommittedConfigurationChanges, DeleteConfigurationChange', async () => {
    // ChangeRequest: node_id and tag omitempty, extend always sent; the bundle with its Metadata (enabled, version; omitempty fields left out).
    const request = {
      node_id: 'root',
      formtype: 'settings',
      extend: false,
      config: {
        enabled: true,
        version: 'v1',
        metrics: true,
        reports: true,
        remoteconsole: true,
        software_inventory: false,
        process_inventory: false,
        agentinterval: 5,
      },
    };
    const created = await t.api('POST', '/api/v2/change', { ...admin(), body: request });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    expectDecodes(created.body, Change);
    const got = await t.api('GET', `/api/v2/change/${created.body.sha}`, admin());
    expectDecodes(got.body, Change);
    // ChangeListQuery.String(): `search` always (ChangeListSearch with omitempty fields), limit/offset when set.
    const list = await t.api('GET', `/api/v2/changelist?${query({ status: 'new' }, { limit: 10 })}`, admin());
    expect(list.status).toBe(200);
    expectDecodes(list.body, { slice: Change });
    expect(list.body.map((c: { sha: string }) => c.sha)).toContain(created.body.sha);
    const times = await t.api(
      'GET',
      `/api/v2/changelist?${query({}, { created_start: '2020-01-01 00:00:00', created_end: '2999-01-01 00:00:00', sort: 'created', sort_direction: 'asc' })}`,
      admin(),
    );
    expect(times.status).toBe(200);
    expect((await t.api('DELETE', `/api/v2/change/${created.body.sha}`, admin())).status).toBe(204);
  });

  it('CommitConfiguration ({message}), GetCommit, ListCommits; DeleteUncommittedConfigurationChanges', async () => {
    await t.api('POST', '/api/v2/change', {
      ...admin(),
      body: {
        tag: 'compat',
        formtype: 'parameters',
        extend: true,
        config: { enabled: true, parameters: [{ key: 'a', value: 'b' }], secrets: [{ key: 's', value: 'hidden-value' }] },
      },
    });
    // CommitRequest{Message}: `changes` omitted when empty, no `action`.
    const committed = await t.api('POST', '/api/v2/commit', { ...admin(), body: { message: 'from qbee-cli' } });
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);
    expectDecodes(committed.body, Commit);
    const extended = await t.api('GET', `/api/v2/commit/${committed.body.sha}`, admin());
    expectDecodes(extended.body, CommitExtended);
    // CommitListQuery.String(): search, sort_field, sort_direction, items_per_page, offset.
    const listed = await t.api('GET', `/api/v2/commitlist?${query({}, { items_per_page: 5 })}`, admin());
    expect(listed.status, JSON.stringify(listed.body)).toBe(200);
    expectDecodes(listed.body, CommitsList);
    expect(listed.body.items[0]).toMatchObject({ sha: committed.body.sha, message: 'from qbee-cli' });
    await t.api('POST', '/api/v2/change', { ...admin(), body: { tag: 'compat', formtype: 'settings', extend: false, config: { enabled: true } } });
    expect((await t.api('DELETE', '/api/v2/changes', admin())).status).toBe(204);
  });

  it('GetActiveConfig and GetConfigPreview decode as ConfigResponse, with and without scope', async () => {
    for (const p of [
      '/api/v2/config/tag/compat?scope=own',
      '/api/v2/config/tag/compat',
      '/api/v2/configpreview/node/root?scope=all',
      '/api/v2/config/node/root',
    ]) {
      const r = await t.api('GET', p, admin());
      expect(r.status, p).toBe(200);
      expectDecodes(r.body, ConfigResponse);
    }
    const own = await t.api('GET', '/api/v2/config/tag/compat?scope=own', admin());
    expect(own.body.config.bundles).toEqual(['parameters']);
    expect(JSON.stringify(own.body)).not.toContain('hidden-value');
  });
});

/** Client.Request: json.NewEncoder(body).Encode(src) (HTML-safe escaping, a trailing newline), application/json, a bearer token. */
function goEncode(value: unknown): string {
  return `${JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}\n`;
}
function cli(method: string, path: string, src?: unknown) {
  return t.api(method, `/api/v2${path}`, {
    token: t.adminToken,
    headers: { 'user-agent': 'qbee-cli/test', ...(src === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(src === undefined ? {} : { body: goEncode(src) }),
  });
}
/** json.Marshal of a map[string]any (what json.Unmarshal of a config file gives): keys sorted. */
function goMap(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(goMap);
  if (!value || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, goMap((value as Record<string, unknown>)[k])]),
  );
}
/** ConfigurationManager.Save(target, bundle, file) with EntityTypeNode, then Commit(message): ChangeRequest{NodeID, BundleName, Content}, CommitRequest{Message}. */
async function configSave(node: string, bundle: string, file: Record<string, unknown>, message: string) {
  const change = await cli('POST', '/change', { node_id: node, formtype: bundle, extend: false, config: goMap(file) });
  expect(change.status, JSON.stringify(change.body)).toBe(200);
  const commit = await cli('POST', '/commit', { message });
  expect(commit.status, JSON.stringify(commit.body)).toBe(200);
  expectDecodesStrictly(commit.body, Commit);
  return { change: change.body, commit: commit.body };
}

describe('configuration as qbee-cli writes and reads it (configmanager.go, commit.go, inventory.go)', () => {
  beforeAll(async () => {
    await t.addGroup({ id: 'cli-ext' });
    await t.addGroup({ id: 'cli-ext-sub', parent: 'cli-ext' });
  });

  it('config save: `extend` in the file’s metadata extends (the request’s extend is always false); GetActiveConfig reads it back', async () => {
    await configSave('cli-ext', 'parameters', { enabled: true, parameters: [{ key: 'from_group', value: '1' }] }, 'group parameters');
    const { change } = await configSave(
      'cli-ext-sub',
      'parameters',
      { enabled: true, extend: true, version: 'v1', parameters: [{ key: 'from_sub', value: '2' }] },
      'sub-group parameters, extending',
    );
    expectDecodesStrictly(change, Change);
    expect(change.content).toMatchObject({ extend: true, config: { extend: true } });
    const own = await cli('GET', '/config/node/cli-ext-sub?scope=own');
    expectDecodes(own.body, ConfigResponse);
    expect(own.body.config.bundle_data.parameters.extend).toBe(true);
    const all = await cli('GET', '/config/node/cli-ext-sub?scope=all');
    expect(all.body.config.bundle_data.parameters.parameters.map((p: { key: string }) => p.key)).toEqual(['from_group', 'from_sub']);
  });

  it('ListCommits: CommitsList with Change objects; search by message and by part of the commit sha', async () => {
    const { commit } = await configSave('cli-ext-sub', 'connectivity_watchdog', { enabled: true, threshold: '9' }, 'watchdog <9> & more');
    const q = (search: Record<string, unknown>, extra: Record<string, string | number> = {}) => cli('GET', `/commitlist?${query(search, extra)}`);
    const all = await q({}, { items_per_page: 5 });
    expect(all.status, JSON.stringify(all.body)).toBe(200);
    expectDecodesStrictly(all.body, CommitsList);
    const byMessage = await q({ message: '<9> &' });
    expect(byMessage.status, JSON.stringify(byMessage.body)).toBe(200);
    expectDecodesStrictly(byMessage.body, CommitsList);
    expect(byMessage.body.total).toBe(1);
    expect(byMessage.body.items[0]).toMatchObject({ sha: commit.sha, message: 'watchdog <9> & more', type: 'config', labels: [] });
    expect(byMessage.body.items[0].changes).toHaveLength(1);
    expect(byMessage.body.items[0].changes[0]).toMatchObject({
      sha: commit.changes[0],
      content: { node_id: 'cli-ext-sub', formtype: 'connectivity_watchdog' },
    });
    // commit_sha: the start of the sha (or any part of it) finds that entry only.
    for (const part of [commit.sha.slice(0, 8), commit.sha.slice(20, 32)]) {
      const bySha = await q({ commit_sha: part });
      expect(bySha.body.items.map((e: { sha: string }) => e.sha)).toEqual([commit.sha]);
    }
    expect((await q({ message: 'no commit says this' })).body).toMatchObject({ total: 0, items: [] });
    // Filters combine; sort and direction as CommitListQuery sends them.
    expect((await q({ message: 'watchdog', commit_sha: 'ffffffffffff' })).body.total).toBe(0);
    await configSave('cli-ext-sub', 'connectivity_watchdog', { enabled: true, threshold: '10' }, 'order check: first');
    await configSave('cli-ext-sub', 'connectivity_watchdog', { enabled: true, threshold: '11' }, 'order check: second');
    for (const [direction, order] of [
      ['asc', ['order check: first', 'order check: second']],
      ['desc', ['order check: second', 'order check: first']],
    ] as const) {
      const ordered = await q({ message: 'order check' }, { sort_field: 'created', sort_direction: direction });
      expect(ordered.body.items.map((e: { message: string }) => e.message)).toEqual(order);
    }
    // The other CommitListSearch fields narrow the same way.
    const shas = async (search: Record<string, unknown>) => (await q({ message: 'watchdog', ...search })).body.items.map((e: { sha: string }) => e.sha);
    const user = await t.broker.services.store.db.selectFrom('users').select(['fname', 'lname']).where('id', '=', commit.user_id).executeTakeFirstOrThrow();
    for (const [search, found] of [
      [{ user_id: commit.user_id }, true],
      [{ user_id: 'someone-else' }, false],
      [{ committer: (user.lname || user.fname).toUpperCase() }, true],
      [{ committer: 'nobody-is-called-this' }, false],
      [{ change_sha: commit.changes[0].slice(4, 16) }, true],
      [{ change_sha: 'f'.repeat(64) }, false],
      [{ labels_include: ['release'] }, false],
      [{ labels_exclude: ['release'] }, true],
      [{ start_date: '2000-01-01 00:00:00', end_date: '2999-12-31 23:59:59' }, true],
      [{ start_date: '2999-01-01 00:00:00' }, false],
      [{ end_date: '2000-01-01 00:00:00' }, false],
    ] as const) {
      expect(await shas(search), JSON.stringify(search)).toEqual(found ? [commit.sha] : []);
    }
    expect((await q({ start_date: '2024-13-45 99:00:00' })).status).toBe(400);
    // A filter this broker cannot apply is a 400, not a bigger answer.
    const unknown = await q({ no_such_filter: 'x' });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ code: 400, field: 'search' });
  });

  it('GetDeviceInventory: pushed_config, device_commit_sha and config_propagated; the list searches and sorts by commit', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', { ...admin(), body: { group_id: 'cli-ext-sub', auto_accept: true } });
    const { device: d } = await enrolDevice(t, Object.keys(created.body)[0], undefined, 'pushed-dev');
    const conn = await connectDevice(t.url, d);
    try {
      conn.send({ t: 'inventory', data: { hostname: 'pushed.lab', arch: 'x86_64', agent_version: '1.4.2', collected_at: new Date().toISOString() } });
      const config = await eventually(() => conn.messages.find((m) => m.t === 'config') as { config: { commit_id: string } } | undefined);
      const before = await eventually(async () => {
        const r = await cli('GET', `/inventory/${d.id}`);
        return r.status === 200 ? r : undefined;
      });
      expectDecodesStrictly(before.body, DeviceInventory);
      expect(before.body).toMatchObject({ device_commit_sha: '', config_propagated: false, pushed_config: { commit_id: config.config.commit_id } });
      expect(before.body.pushed_config.bundles).toEqual(expect.arrayContaining(['parameters', 'connectivity_watchdog']));
      expect(before.body.pushed_config.bundle_data.parameters.parameters.map((p: { key: string }) => p.key)).toEqual(['from_group', 'from_sub']);
      // The agent applied it.
      conn.send({ t: 'config_applied', commit_id: config.config.commit_id, reports: [] });
      const after = await eventually(async () => {
        const r = await cli('GET', `/inventory/${d.id}`);
        return r.body.config_propagated ? r : undefined;
      });
      expectDecodesStrictly(after.body, DeviceInventory);
      expect(after.body).toMatchObject({ device_commit_sha: config.config.commit_id, system: { last_config_commit_id: config.config.commit_id } });
      // InventoryListSearch.CommitSHA (partial) and the commit orders.
      const ids = (r: { body: { items: { node_id: string }[] } }) => r.body.items.map((i) => i.node_id);
      const found = await cli('GET', `/inventory?${query({ commit_sha: config.config.commit_id.slice(0, 10) })}`);
      expect(found.status, JSON.stringify(found.body)).toBe(200);
      expectDecodes(found.body, InventoryListResponse);
      expect(ids(found)).toEqual([d.id]);
      expect(ids(await cli('GET', `/inventory?${query({ commit_sha: 'f'.repeat(64) })}`))).toEqual([]);
      for (const sort_field of ['last_policy_update', 'commit_sha']) {
        const sorted = await cli('GET', `/inventory?${query({}, { sort_field, sort_direction: 'desc', items_per_page: 1000 })}`);
        expect(sorted.status, sort_field).toBe(200);
        expect(ids(sorted)[0], sort_field).toBe(d.id);
      }
      // Someone with inventory:read (and device:read, which bounds it) but no configuration:read sees the
      // commit, not the configuration.
      const inventoryOnly = await t.tokenWith([{ permission: 'inventory:read' }, { permission: 'device:read' }]);
      const limited = await t.api('GET', `/api/v2/inventory/${d.id}`, { token: inventoryOnly });
      expectDecodesStrictly(limited.body, DeviceInventory);
      expect(limited.body.pushed_config).toEqual({ commit_id: config.config.commit_id, bundles: [], bundle_data: {} });
      expect(limited.body.settings.enabled).toBe(false);
    } finally {
      conn.ws.close();
    }
  });

  it('strict decoding catches a field the client reads under another name (the old memory names)', () => {
    const old = {
      filesystem: { reported: 1, mounts: [] },
      cpu: { reported: 1, user: 0, system: 0, io: 0 },
      load: { reported: 1, '1min': 0, '5min': 0, '15min': 0 },
    };
    expect(decodeProblems({ ...old, memory: { reported: 1, free: 2048, util: 41, swap: 0 } }, MetricsSummary)).toEqual([
      '$.memory.used: missing',
      '$.memory.swap_used: missing',
      '$.memory.available: missing',
    ]);
  });
});
