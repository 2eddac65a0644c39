/**
 * "Seen" of an online device is its last heartbeat: the hub keeps when a connected agent was last
 * heard from in memory (the database's last_seen is written at most once a minute), and the
 * device status, the group tree and a node report that.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GroupTreeNode } from '../../shared/api-types.js';
import { connectDevice, enrolDevice, eventually } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

function findDevice(node: GroupTreeNode, id: string): GroupTreeNode | undefined {
  if (node.node_id === id) return node;
  for (const c of node.nodes ?? []) {
    const found = findDevice(c, id);
    if (found) return found;
  }
  return undefined;
}

async function seen(id: string, token = t.adminToken) {
  const status = await t.api<{ connected: boolean; last_seen: string | null }>('GET', `/api/v2/device/${id}/status`, { token });
  const tree = await t.api<{ tree: GroupTreeNode }>('GET', '/api/v2/grouptree', { token });
  const node = await t.api<{ last_reported: number | null }>('GET', `/api/v2/node/${id}`, { token });
  const stored = await t.broker.services.store.db.selectFrom('devices').select('last_seen').where('device_id', '=', id).executeTakeFirstOrThrow();
  return {
    status: status.body,
    tree: findDevice(tree.body.tree, id)?.last_reported ?? null,
    node: node.body.last_reported,
    stored: stored.last_seen,
  };
}

/** Waits until the wall clock is past a whole second after `iso`, so a later time shows in Unix seconds too. */
async function pastSecondOf(iso: string): Promise<void> {
  const next = (Math.floor(Date.parse(iso) / 1000) + 1) * 1000;
  await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now() + 20)));
}

describe('last heard of connected agents', () => {
  it('moves "seen" forward on each heartbeat while the device stays online, without writing the database', async () => {
    const created = await t.api<Record<string, unknown>>('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
    const { device, answer } = await enrolDevice(t, Object.keys(created.body)[0]);
    expect(answer.status).toBe(200);
    const connecting = Date.now();
    const conn = await connectDevice(t.url, device);
    expect(conn.welcome?.device_id).toBe(device.id);
    // The connect is written; wait for it so the comparison below starts from it.
    const before = await eventually(async () => {
      const s = await seen(device.id);
      // (enrolment stamps last_seen too: wait for the connect's own write, not that one)
      return s.stored && Date.parse(s.stored) >= connecting && s.status.connected && s.tree !== null ? s : undefined;
    });
    expect(before.status.last_seen).not.toBeNull();

    await pastSecondOf(before.status.last_seen as string);
    // A heartbeat: the agent pings (the broker's pings answered by pongs count the same way).
    await new Promise<void>((resolve) => {
      conn.ws.once('pong', () => resolve());
      conn.ws.ping();
    });
    const after = await seen(device.id);
    expect(after.status.connected).toBe(true);
    expect(Date.parse(after.status.last_seen as string)).toBeGreaterThan(Date.parse(before.status.last_seen as string));
    expect(after.tree).toBeGreaterThan(before.tree as number);
    expect(after.node).toBeGreaterThan(before.node as number);
    expect(after.tree).toBe(Math.floor(Date.parse(after.status.last_seen as string) / 1000));
    // Not written per heartbeat: the stored last contact is still the connect's.
    expect(after.stored).toBe(before.stored);

    // A user who may not read the device learns nothing of it.
    const other = await t.userWith([{ permission: 'device:read', resources: ['node:no-such-group'] }]);
    const refused = await t.api('GET', `/api/v2/device/${device.id}/status`, { token: other.token });
    expect([403, 404]).toContain(refused.status);
    const tree = await t.api<{ tree: GroupTreeNode }>('GET', '/api/v2/grouptree', { token: other.token });
    expect(findDevice(tree.body.tree, device.id)).toBeUndefined();

    // Once it leaves, "seen" is the stored last contact (written at disconnect) and stays.
    conn.ws.close();
    const gone = await eventually(async () => {
      const s = await seen(device.id);
      // (the disconnect is written just after the agent leaves)
      return !s.status.connected && s.stored !== before.stored && s.status.last_seen === s.stored ? s : undefined;
    });
    expect(Date.parse(gone.stored as string)).toBeGreaterThanOrEqual(Date.parse(after.status.last_seen as string));
  });
});
