import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AccessService } from '../access/access.js';
import { openStore, type Store } from '../db/database.js';
import { readTreeShape } from '../devices/directory.js';
import { ensureSystemNodes } from '../devices/scope.js';
import { commitShasWithChangeLike } from './audit-queries.js';
import { deviceConfigStates } from './device-rows.js';
import { EntityAccess } from './entities.js';
import { Rendering, type Pushable } from './rendering.js';
import { ConfigStore } from './store.js';

const dev = (n: number) => n.toString(16).padStart(64, '0');

let store: Store;
beforeEach(async () => {
  store = await openStore('sqlite::memory:');
  await ensureSystemNodes(store.db);
});
afterEach(async () => {
  await store.close();
});

async function node(node_id: string, parent_id: string | null, type: 'group' | 'device', tags: string[]): Promise<void> {
  await store.db
    .insertInto('nodes')
    .values({ node_id, parent_id, type, title: node_id.slice(0, 8).toUpperCase(), tags: JSON.stringify(tags), created_at: '2026-01-01T00:00:00.000Z' })
    .execute();
  if (type === 'device')
    await store.db
      .insertInto('devices')
      .values({
        device_id: node_id,
        public_key: '',
        state: 'approved',
        hostname: node_id.slice(0, 8),
        bootstrap_key: null,
        attributes: JSON.stringify({ custom: { where: node_id.slice(-2) } }),
        created_at: '2026-01-01T00:00:00.000Z',
        approved_at: null,
        last_seen: null,
        last_ip: null,
        agent_version: null,
      })
      .execute();
}

/** Each entity adds a parameter of its own, extending what it inherits: the order shows the levels' order. */
async function parameters(entity_type: 'node' | 'tag', entity_id: string, minute: number): Promise<void> {
  await store.db
    .insertInto('config_entities')
    .values({
      entity_type,
      entity_id,
      bundle: 'parameters',
      extend: 1,
      data: JSON.stringify({ parameters: [{ key: `${entity_type}:${entity_id}`, value: String(minute) }] }),
      commit_sha: `c${minute}`,
      commit_created: `2026-01-01T00:${String(minute).padStart(2, '0')}:00.000Z`,
    })
    .execute();
}

function rendering(): Rendering {
  const q = new ConfigStore(store.db);
  const files = { metadata: () => Promise.reject(new Error('none')), download: () => Promise.reject(new Error('none')) };
  const entities = new EntityAccess(store.db, {} as AccessService);
  return new Rendering(store.db, q, entities, files, { key: Buffer.alloc(32) }, () => Promise.resolve({}));
}

describe('rendering every device from one read of the tree', () => {
  it('gives each device what rendering it alone gives: groups, inherited and own tags ranked by depth, attributes', async () => {
    await store.db.updateTable('nodes').set({ tags: '["top"]' }).where('node_id', '=', 'root').execute();
    await node('g1', 'root', 'group', ['a', 'top']);
    await node('g2', 'g1', 'group', ['b', 'a', 'b']);
    await node(dev(1), 'g2', 'device', ['c', 'b', 'top']);
    await node(dev(2), 'root', 'device', []);
    await node(dev(3), 'unassigned_group', 'device', ['a']);
    await node(dev(4), 'g1', 'device', ['b']);
    // out of the tree: its parent is gone
    await node(dev(5), 'no-such-group', 'device', []);
    // newer commits first on the deeper tags, so that only ranks order them
    for (const [type, id, minute] of [
      ['node', 'root', 1],
      ['tag', 'top', 9],
      ['tag', 'a', 8],
      ['tag', 'b', 7],
      ['tag', 'c', 6],
      ['node', 'g1', 2],
      ['node', 'g2', 3],
      ['node', dev(1), 4],
      ['node', dev(4), 5],
    ] as const)
      await parameters(type, id, minute);

    const r = rendering();
    const q = new ConfigStore(store.db);
    const fleet = new Map<string, Pushable>();
    for await (const { deviceId, out } of r.fleet(await readTreeShape(store.db), await q.allEntities())) fleet.set(deviceId, out);

    expect([...fleet.keys()].sort()).toEqual([dev(1), dev(2), dev(3), dev(4)]);
    for (const [id, out] of fleet) expect(out).toEqual(await r.deviceRendered(id));
    expect(await r.deviceRendered(dev(5))).toBeUndefined();
    const keys = (fleet.get(dev(1))!.config.bundle_data.parameters as { parameters: { key: string }[] }).parameters.map((p) => p.key);
    expect(keys).toEqual(['node:root', 'node:g1', 'node:g2', 'tag:top', 'tag:a', 'tag:b', 'tag:c', `node:${dev(1)}`]);
    expect(fleet.get(dev(1))!.attributes).toEqual({ where: '01' });

    // `only`: those devices, rendered alike
    const some = new Map<string, Pushable>();
    for await (const { deviceId, out } of r.fleet(await readTreeShape(store.db), await q.allEntities(), new Set([dev(4), dev(5)]))) some.set(deviceId, out);
    expect([...some.keys()]).toEqual([dev(4)]);
    expect(some.get(dev(4))).toEqual(fleet.get(dev(4)));
  });
});

describe('what the configuration domain answers other domains', () => {
  it('reads devices’ configuration states by id, or all of them', async () => {
    const q = new ConfigStore(store.db);
    await q.recordState(dev(1), 'c1', 'd1');
    await q.recordApplied(dev(1), 'c0', '2026-01-01T00:00:00.000Z');
    await q.recordApplied(dev(2), 'c1', '2026-01-02T00:00:00.000Z');
    const some = await deviceConfigStates(store.db, [dev(1), dev(3)]);
    expect(some).toEqual([{ device_id: dev(1), commit_sha: 'c1', device_commit_sha: 'c0', applied_at: '2026-01-01T00:00:00.000Z' }]);
    expect((await deviceConfigStates(store.db)).map((s) => s.device_id).sort()).toEqual([dev(1), dev(2)]);
  });

  it('finds commits by a pattern of their changes’ shas, as a subquery', async () => {
    const q = new ConfigStore(store.db);
    const change = (id: string, sha: string, commit_sha: string | null) =>
      q.insertChange({
        id,
        sha,
        user_id: 'u',
        status: commit_sha ? 'committed' : 'new',
        entity_type: 'tag',
        entity_id: 't',
        bundle: 'parameters',
        extend: 0,
        content: '{}',
        commit_sha,
        created_at: '2026-01-01T00:00:00.000Z',
        updated_at: '2026-01-01T00:00:00.000Z',
        seq: Number(id),
      });
    await change('1', 'abc123', 'k1');
    await change('2', 'abd456', 'k2');
    await change('3', 'abc789', null);
    const rows = await commitShasWithChangeLike(store.db, '%bc%').execute();
    expect(rows.map((r) => r.commit_sha).sort()).toEqual(['k1', null]);
    const found = await store.db.selectFrom('config_commits').select('sha').where('sha', 'in', commitShasWithChangeLike(store.db, 'abd%')).execute();
    expect(found).toEqual([]);
  });
});
