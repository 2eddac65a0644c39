/**
 * Requests as the API client of qbee-agent's end-to-end tests (github.com/qbee-io/qbee-agent,
 * test/api.go) sends them: it creates a bootstrap key, points it at a group, approves the
 * device and manages files by bare name. Answers are decoded as that client's Go types.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enrolDevice } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { BootstrapKeyResponse, Change, Commit, ConfigResponse, expectDecodes, PendingDevices } from './go-shape.js';

let t: TestBroker;

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

const admin = () => ({ token: t.adminToken });

describe('qbee-agent test API client', () => {
  it('creates a key and sets its group with {"auto_accept":true,"group":"root"}', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', admin());
    expectDecodes(created.body, BootstrapKeyResponse);
    const [key] = Object.keys(created.body);
    const r = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { auto_accept: true, group: 'root' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ group_id: 'root', auto_accept: true });
    // `group` and `group_id` disagreeing is refused rather than one of them silently winning.
    const both = await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { group: 'root', group_id: 'unassigned_group' } });
    expect(both.status).toBe(400);
    // A device enrolling with it lands in root, approved at once.
    const { answer, device } = await enrolDevice(t, key);
    expect(answer.body).toEqual({ device_id: device.id, state: 'approved', broker_key: t.broker.services.brokerKey.publicKeyPem });
    expect((await t.api('GET', `/api/v2/node/${device.id}`, admin())).body.parent_id).toBe('root');
  });

  it('lists pending devices as an array and approves one', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', admin());
    const { device } = await enrolDevice(t, Object.keys(created.body)[0]);
    const pending = await t.api('GET', '/api/v2/pendinghost', admin());
    expectDecodes(pending.body, PendingDevices);
    expect(pending.body.map((h: { pub_key_digest: string }) => h.pub_key_digest)).toContain(device.id);
    expect((await t.api('POST', '/api/v2/pendinghost', { ...admin(), body: { node_id: device.id } })).status).toBe(200);
  });

  it('deletes a file named without the leading "/": DELETE /file?path=name', async () => {
    const form = new FormData();
    form.append('file', new Blob(['x']), 'agent-test.txt');
    form.append('path', '/');
    expect((await t.api('POST', '/api/v2/file', { ...admin(), body: form })).status).toBe(200);
    const stored = path.join(t.dataDir, 'files', 'agent-test.txt');
    expect(fs.existsSync(stored)).toBe(true);
    const r = await t.api('DELETE', '/api/v2/file?path=agent-test.txt', admin());
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({ path: '/agent-test.txt' });
    expect(fs.existsSync(stored)).toBe(false);
    // Still inside the store: a bare name cannot climb out.
    expect((await t.api('DELETE', '/api/v2/file?path=..%2Fsecret', admin())).status).toBe(400);
  });
});

describe('qbee-agent test API client: configuration', () => {
  it('ChangeConfig posts {node_id, formtype, config} and CommitConfig {action:"commit", message}; the device reads it back', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', admin());
    const [key] = Object.keys(created.body);
    await t.api('PUT', `/api/v2/bootstrapkey/${key}`, { ...admin(), body: { auto_accept: true, group: 'root' } });
    const { device } = await enrolDevice(t, key);
    const change = await t.api('POST', '/api/v2/change', {
      ...admin(),
      body: {
        node_id: device.id,
        formtype: 'file_distribution',
        config: { enabled: true, files: [{ templates: [{ source: '/x.txt', destination: '/tmp/x.txt', is_template: false }] }] },
      },
    });
    expect(change.status, JSON.stringify(change.body)).toBe(200);
    expectDecodes(change.body, Change);
    const commit = await t.api('POST', '/api/v2/commit', { ...admin(), body: { action: 'commit', message: 'agent test' } });
    expect(commit.status).toBe(200);
    expectDecodes(commit.body, Commit);
    const cfg = await t.api('GET', `/api/v2/config/${device.id}`, admin());
    expectDecodes(cfg.body, ConfigResponse);
    expect(cfg.body.config).toMatchObject({ commit_id: commit.body.sha, bundles: ['file_distribution'] });
  });
});
