/**
 * End to end: a real broker and real agent processes. Enrolment with a bootstrap key, approval,
 * the connection and its status, inventory, removal, broker restart and reload.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/environment.js';
import { createLogger } from '../../broker/logger.js';
import { startBroker } from '../../broker/server.js';
import { AgentClose } from '../../shared/protocol.js';
import { connectDevice, eventually, startAgent, type TestAgent } from '../support/agent.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
const agents: TestAgent[] = [];

function agent(options: Parameters<typeof startAgent>[0]): TestAgent {
  const a = startAgent(options);
  agents.push(a);
  return a;
}

async function createKey(body: { group_id?: string; auto_accept?: boolean; label?: string; expires_at?: string } = {}): Promise<string> {
  const r = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body });
  expect(r.status).toBe(200);
  return Object.keys(r.body)[0];
}

interface TreeNode {
  node_id: string;
  type: string;
  status?: string;
  nodes?: TreeNode[];
}

function findNode(node: TreeNode, id: string, parent?: TreeNode): { node: TreeNode; parent?: TreeNode } | undefined {
  if (node.node_id === id) return { node, parent };
  for (const child of node.nodes ?? []) {
    const found = findNode(child, id, node);
    if (found) return found;
  }
  return undefined;
}

/** The agent's handshake by hand, with the key in its state directory: how the broker closes. */
async function handshakeWithKey(url: string, stateDir: string, deviceId: string): Promise<number> {
  const privateKey = crypto.createPrivateKey(fs.readFileSync(path.join(stateDir, 'device-key.pem')));
  const conn = await connectDevice(url, { id: deviceId, privateKey, publicKeyPem: '' });
  return conn.closed;
}

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  await t.addGroup({ id: 'site-a', title: 'Site A' });
});
afterEach(async () => {
  // A later agent may run in an earlier one's state directory: it stops before that owner removes it.
  for (const a of agents.splice(0).reverse()) await a.close();
});
afterAll(async () => {
  await t?.close();
});

describe('enrolment end to end', () => {
  it('enrols with a bootstrap key, waits as a pending host, connects once approved and reports its inventory', async () => {
    const key = await createKey({ group_id: 'site-a' });
    const a = agent({ broker: t.url, bootstrapKey: key });
    const id = await a.deviceId();
    expect(id).toMatch(/^[0-9a-f]{64}$/);
    await a.waitForLog((l) => l.msg.startsWith('enrolled: waiting for an operator'));

    const pending = await eventually(async () => {
      const r = await t.api('GET', '/api/v2/pendinghost', { token: t.adminToken });
      return r.body.find((h: { node_id: string }) => h.node_id === id);
    });
    expect(pending).toMatchObject({ node_id: id, group_id: 'site-a', last_ip: '127.0.0.1' });
    expect(pending.public_key_fingerprint).toBe((await a.waitForLog((l) => l.msg === 'device identity')).fingerprint);
    // Still pending: the broker refuses the connection (4409) and the agent keeps trying.
    await a.waitForLog((l) => l.msg === 'waiting for approval' || l.msg.startsWith('enrolled: waiting'));
    expect(t.broker.services.agents.isConnected(id)).toBe(false);
    const before = await t.api('GET', `/api/v2/device/${id}/status`, { token: t.adminToken });
    expect(before.status).toBe(404);

    const approved = await t.api('POST', '/api/v2/pendinghost', { token: t.adminToken, body: { node_id: id } });
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ node_id: id, state: 'approved', group_id: 'site-a' });
    await a.waitConnected(t);

    const status = await t.api('GET', `/api/v2/device/${id}/status`, { token: t.adminToken });
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ uuid: id, connected: true, remote_access: true });
    expect(Date.parse(status.body.last_seen)).toBeGreaterThan(Date.now() - 60_000);

    const tree = await t.api('GET', '/api/v2/grouptree', { token: t.adminToken });
    const placed = findNode(tree.body.tree, id);
    expect(placed?.parent?.node_id).toBe('site-a');
    expect(placed?.node.status).toBe('online');

    const inventory = await eventually(async () => {
      const r = await t.api('GET', `/api/v2/inventory/${id}`, { token: t.adminToken });
      return r.status === 200 ? r.body : undefined;
    });
    expect(inventory.device_id).toBe(id);
    expect(typeof inventory.hostname).toBe('string');
    expect(inventory.os.name).toBeTruthy();
    expect(inventory.kernel).toBeTruthy();
    expect(inventory.arch).toBeTruthy();
    expect(inventory.cpu.cores).toBeGreaterThan(0);
    expect(inventory.memory.total).toBeGreaterThan(0);
    expect(inventory.disks.length).toBeGreaterThan(0);
    expect(inventory.network.length).toBeGreaterThan(0);
    expect(inventory.agent_version).toMatch(/^\d+\.\d+\.\d+/);
    expect(Date.parse(inventory.received_at)).toBeGreaterThan(0);

    const stats = await t.api('GET', '/api/v2/inventoryonlinestats', { token: t.adminToken });
    expect(stats.body.online).toBeGreaterThanOrEqual(1);

    // Stopping the agent ends the connection; the status follows at once.
    await a.close();
    await eventually(() => !t.broker.services.agents.isConnected(id), 10_000, 'the disconnect');
    const after = await t.api('GET', `/api/v2/device/${id}/status`, { token: t.adminToken });
    expect(after.body.connected).toBe(false);
  });

  it('connects at once with an auto-accept key and lands in the key group', async () => {
    const key = await createKey({ group_id: 'site-a', auto_accept: true });
    const a = agent({ broker: t.url, bootstrapKey: key });
    const id = await a.waitConnected(t);
    await a.waitForLog((l) => l.msg === 'enrolled and approved');
    const node = await t.api('GET', `/api/v2/node/${id}`, { token: t.adminToken });
    expect(node.status).toBe(200);
    expect(node.body.parent_id).toBe('site-a');
  });

  it('enrols with the key from FLEET_BOOTSTRAP_KEY or --bootstrap-key-file, keeping it off the command line', async () => {
    const key = await createKey({ auto_accept: true });
    const fromEnv = agent({ broker: t.url, env: { FLEET_BOOTSTRAP_KEY: key } });
    expect(fromEnv.process.spawnargs.join(' ')).not.toContain(key);
    const keyFile = path.join(t.dataDir, 'agent-bootstrap-key');
    fs.writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
    const fromFile = agent({ broker: t.url, args: ['--bootstrap-key-file', keyFile] });
    expect(fromFile.process.spawnargs.join(' ')).not.toContain(key);
    const ids = await Promise.all([fromEnv.waitConnected(t), fromFile.waitConnected(t)]);
    expect(ids[0]).not.toBe(ids[1]);
    for (const id of ids) expect((await t.api('GET', `/api/v2/node/${id}`, { token: t.adminToken })).status).toBe(200);
  });

  it('refuses an unknown bootstrap key with a clear message and exit code 78', async () => {
    const a = agent({ broker: t.url, bootstrapKey: 'no-such-key-0000000000000000' });
    expect(await a.exited()).toBe(78);
    expect(a.logs.some((l) => /unknown_bootstrap_key/.test(l.msg))).toBe(true);
    // The key is never logged.
    expect(JSON.stringify(a.logs)).not.toContain('no-such-key-0000000000000000');
  });

  it('refuses an expired bootstrap key with a message naming the expiry and exit code 78', async () => {
    const key = await createKey({ auto_accept: true, label: 'expired batch', expires_at: new Date(Date.now() + 3600_000).toISOString() });
    const past = new Date(Date.now() - 60_000).toISOString();
    await t.broker.services.store.db.updateTable('bootstrap_keys').set({ expires_at: past }).where('key_secret', '=', key).execute();
    const a = agent({ broker: t.url, bootstrapKey: key });
    expect(await a.exited()).toBe(78);
    const line = a.logs.find((l) => /bootstrap_key_expired/.test(l.msg));
    expect(line?.msg).toContain(`expired at ${past}`);
    expect(JSON.stringify(a.logs)).not.toContain(key);
  });

  it('cuts a removed device off at once, and its key cannot come back', async () => {
    const key = await createKey({ auto_accept: true });
    const a = agent({ broker: t.url, bootstrapKey: key });
    const id = await a.waitConnected(t);
    const r = await t.api('DELETE', `/api/v2/removeapprovedhost/${id}`, { token: t.adminToken });
    expect(r.status).toBe(204);
    expect(t.broker.services.agents.isConnected(id)).toBe(false);
    // The agent is told (4403), records it and stops instead of retrying.
    expect(await a.exited()).toBe(78);
    expect(a.logs.some((l) => /refuses this device key/.test(l.msg))).toBe(true);
    const state = JSON.parse(fs.readFileSync(path.join(a.stateDir, 'agent-state.json'), 'utf8'));
    expect(state.revoked.reason).toMatch(/removed/);
    // The old key is refused by the broker, on the channel and at enrolment.
    expect(await handshakeWithKey(t.url, a.stateDir, id)).toBe(AgentClose.removed);
    expect((await t.api('GET', `/api/v2/device/${id}/status`, { token: t.adminToken })).status).toBe(404);
  });

  it('enrols again as a new device only when started again with a bootstrap key', async () => {
    const key = await createKey({ auto_accept: true });
    const first = agent({ broker: t.url, bootstrapKey: key });
    const oldId = await first.waitConnected(t);
    expect((await t.api('DELETE', `/api/v2/removeapprovedhost/${oldId}`, { token: t.adminToken })).status).toBe(204);
    expect(await first.exited()).toBe(78);
    // Without a bootstrap key the revoked state stops it at once.
    const without = agent({ broker: t.url, stateDir: first.stateDir });
    expect(await without.exited()).toBe(78);
    // With one, a new key pair enrols as a new device.
    const again = agent({ broker: t.url, stateDir: first.stateDir, bootstrapKey: key });
    await again.waitForLog((l) => l.msg.startsWith('the previous device key was revoked'));
    const newId = await eventually(() =>
      again.logs
        .filter((l) => l.msg === 'device identity')
        .map((l) => l.deviceId as string)
        .find((d) => d !== oldId),
    );
    await eventually(() => t.broker.services.agents.isConnected(newId), 20_000, 'the new device to connect');
    expect(newId).not.toBe(oldId);
  });

  it('reloads: the agent acknowledges, reconnects and reports again', async () => {
    const key = await createKey({ auto_accept: true });
    const a = agent({ broker: t.url, bootstrapKey: key });
    const id = await a.waitConnected(t);
    const connects = () => a.logs.filter((l) => l.msg === 'connected to the broker').length;
    const before = connects();
    await t.broker.services.agents.reload(id);
    await a.waitForLog((l) => l.msg === 'reload: restarting the work loop');
    await eventually(() => connects() > before && t.broker.services.agents.isConnected(id), 20_000, 'the reconnect after reload');
  });

  it('exits with 0 on reload under a service manager (--exit-on-reload)', async () => {
    const key = await createKey({ auto_accept: true });
    const a = agent({ broker: t.url, bootstrapKey: key, args: ['--exit-on-reload'] });
    const id = await a.waitConnected(t);
    await t.broker.services.agents.reload(id);
    expect(await a.exited()).toBe(0);
  });
});

describe('broker restart', () => {
  it('the agent reconnects with backoff after the broker comes back', async () => {
    const key = await createKey({ auto_accept: true });
    const a = agent({ broker: t.url, bootstrapKey: key });
    const id = await a.waitConnected(t);
    const port = t.broker.port;
    await t.broker.close();
    await a.waitForLog((l) => l.msg === 'connection to the broker lost' || l.msg === 'cannot connect to the broker');
    const config = loadConfig({
      DATA_DIR: t.dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      ADMIN_EMAIL: ADMIN.email,
      ADMIN_PASSWORD: ADMIN.password,
      LOG_LEVEL: 'silent',
    });
    const again = await startBroker(config, createLogger('silent'));
    try {
      await eventually(() => again.services.agents.isConnected(id), 20_000, 'the reconnect to the restarted broker');
    } finally {
      await a.close();
      await again.close();
    }
  });
});
