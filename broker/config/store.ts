/**
 * Queries of the configuration domain, the only SQL on its tables: staged and committed changes
 * (`config_changes`), commits (`config_commits`), entities' own bundles (`config_entities`) and what
 * each device should run and last applied (`device_config`).
 */
import type { Selectable } from 'kysely';
import { sql, type Db } from '../db/database.js';
import type { ConfigChangesTable, ConfigCommitsTable, ConfigEntitiesTable, DeviceConfigTable } from '../db/schema.js';
import type { BundleData } from './bundles.js';
import type { EntityType, Level, OwnBundle } from './render.js';

export type ChangeRow = Selectable<ConfigChangesTable>;
export type EntityRow = Selectable<ConfigEntitiesTable>;
export type CommitRow = Selectable<ConfigCommitsTable>;
export type DeviceConfigRow = Selectable<DeviceConfigTable>;

/** What GET /changelist narrows the caller's changes to (the caller's own, always). */
export interface ChangeFilter {
  userId: string;
  status: string;
  bundle?: string;
  /** changes on this node */
  nodeId?: string;
  createdFrom?: string;
  createdBefore?: string;
  sort: 'id' | 'seq';
  direction: 'asc' | 'desc';
  offset: number;
  limit: number;
}

/** Ids in one `in (…)` list. */
const ID_BATCH = 500;

export function ownBundleOf(row: EntityRow): OwnBundle {
  return {
    extend: Number(row.extend) === 1,
    data: JSON.parse(row.data) as BundleData,
    commitSha: row.commit_sha,
    commitCreated: Date.parse(row.commit_created),
  };
}

export class ConfigStore {
  constructor(private readonly db: Db) {}

  // ---- changes ----------------------------------------------------------------------------------

  async staged(userId: string): Promise<ChangeRow[]> {
    return this.db.selectFrom('config_changes').selectAll().where('user_id', '=', userId).where('status', '=', 'new').orderBy('seq').execute();
  }

  /** The user's staged changes of one entity and bundle. */
  async stagedOf(userId: string, entity: { type: EntityType; id: string }, bundle: string): Promise<ChangeRow[]> {
    return this.db
      .selectFrom('config_changes')
      .selectAll()
      .where('user_id', '=', userId)
      .where('status', '=', 'new')
      .where('entity_type', '=', entity.type)
      .where('entity_id', '=', entity.id)
      .where('bundle', '=', bundle)
      .execute();
  }

  async countStaged(userId: string): Promise<number> {
    const { count } = await this.db
      .selectFrom('config_changes')
      .select((eb) => eb.fn.countAll<number>().as('count'))
      .where('user_id', '=', userId)
      .where('status', '=', 'new')
      .executeTakeFirstOrThrow();
    return Number(count);
  }

  async change(sha: string): Promise<ChangeRow | undefined> {
    return this.db.selectFrom('config_changes').selectAll().where('sha', '=', sha).executeTakeFirst();
  }

  async nextSeq(): Promise<number> {
    const row = await this.db
      .selectFrom('config_changes')
      .select((eb) => eb.fn.max<number>('seq').as('seq'))
      .executeTakeFirst();
    return Number(row?.seq ?? 0) + 1;
  }

  async insertChange(row: ChangeRow): Promise<void> {
    await this.db.insertInto('config_changes').values(row).execute();
  }

  async deleteChanges(ids: string[]): Promise<void> {
    if (ids.length > 0) await this.db.deleteFrom('config_changes').where('id', 'in', ids).execute();
  }

  async deleteStaged(userId: string): Promise<void> {
    await this.db.deleteFrom('config_changes').where('user_id', '=', userId).where('status', '=', 'new').execute();
  }

  async listChanges(f: ChangeFilter): Promise<ChangeRow[]> {
    let q = this.db.selectFrom('config_changes').selectAll().where('user_id', '=', f.userId).where('status', '=', f.status);
    if (f.bundle !== undefined) q = q.where('bundle', '=', f.bundle);
    if (f.nodeId !== undefined) q = q.where('entity_type', '=', 'node').where('entity_id', '=', f.nodeId);
    if (f.createdFrom !== undefined) q = q.where('created_at', '>=', f.createdFrom);
    if (f.createdBefore !== undefined) q = q.where('created_at', '<', f.createdBefore);
    return q.orderBy(f.sort, f.direction).offset(f.offset).limit(f.limit).execute();
  }

  // ---- commits ----------------------------------------------------------------------------------

  async insertCommit(row: CommitRow): Promise<void> {
    await this.db.insertInto('config_commits').values(row).execute();
  }

  async commitRow(sha: string): Promise<CommitRow | undefined> {
    return this.db.selectFrom('config_commits').selectAll().where('sha', '=', sha).executeTakeFirst();
  }

  /** A committed change applied to its entity: its own bundle replaced, or removed by reset_to_group. */
  async applyChange(c: ChangeRow, commitSha: string, now: string, reset: boolean): Promise<void> {
    if (reset) {
      await this.db
        .deleteFrom('config_entities')
        .where('entity_type', '=', c.entity_type)
        .where('entity_id', '=', c.entity_id)
        .where('bundle', '=', c.bundle)
        .execute();
      return;
    }
    const values = { extend: c.extend, data: c.content, commit_sha: commitSha, commit_created: now };
    await this.db
      .insertInto('config_entities')
      .values({ entity_type: c.entity_type, entity_id: c.entity_id, bundle: c.bundle, ...values })
      .onConflict((oc) => oc.columns(['entity_type', 'entity_id', 'bundle']).doUpdateSet(values))
      .execute();
  }

  async markCommitted(ids: string[], commitSha: string, now: string): Promise<void> {
    await this.db.updateTable('config_changes').set({ status: 'committed', commit_sha: commitSha, updated_at: now }).where('id', 'in', ids).execute();
  }

  /** Bytes of configuration the changes of these commits hold. */
  async changeBytes(commitShas: string[]): Promise<number> {
    const size = await this.db
      .selectFrom('config_changes')
      .select((eb) => eb.fn.sum<number>(sql<number>`length(content)`).as('bytes'))
      .where('commit_sha', 'in', commitShas)
      .executeTakeFirst();
    return Number(size?.bytes ?? 0);
  }

  /** The changes of these commits, in the order staged. */
  async changesOf(commitShas: string[]): Promise<ChangeRow[]> {
    return this.db.selectFrom('config_changes').selectAll().where('commit_sha', 'in', commitShas).orderBy('seq').execute();
  }

  // ---- entities ---------------------------------------------------------------------------------

  /** Own committed bundles of these entities. */
  async entities(keys: { type: EntityType; id: string }[]): Promise<EntityRow[]> {
    if (keys.length === 0) return [];
    const nodes = keys.filter((k) => k.type === 'node').map((k) => k.id);
    const tags = keys.filter((k) => k.type === 'tag').map((k) => k.id);
    return this.db
      .selectFrom('config_entities')
      .selectAll()
      .where((eb) =>
        eb.or([
          ...(nodes.length ? [eb.and([eb('entity_type', '=', 'node'), eb('entity_id', 'in', nodes)])] : []),
          ...(tags.length ? [eb.and([eb('entity_type', '=', 'tag'), eb('entity_id', 'in', tags)])] : []),
        ]),
      )
      .execute();
  }

  async allEntities(): Promise<EntityRow[]> {
    return this.db.selectFrom('config_entities').selectAll().execute();
  }

  /** Removes the bundles of these nodes committed before `before` (what is committed later stays). */
  async deleteNodeEntities(nodeIds: string[], before: string): Promise<void> {
    for (let i = 0; i < nodeIds.length; i += ID_BATCH) {
      await this.db
        .deleteFrom('config_entities')
        .where('entity_type', '=', 'node')
        .where('entity_id', 'in', nodeIds.slice(i, i + ID_BATCH))
        .where('commit_created', '<', before)
        .execute();
    }
  }

  // ---- device state -----------------------------------------------------------------------------

  /** The digest of each device's recorded configuration. */
  async digests(): Promise<Map<string, string | null>> {
    return new Map((await this.db.selectFrom('device_config').select(['device_id', 'digest']).execute()).map((r) => [r.device_id, r.digest]));
  }

  /** The recorded digests of these devices (those without a row are left out). */
  async digestsOf(deviceIds: string[]): Promise<Map<string, string | null>> {
    const out = new Map<string, string | null>();
    for (let i = 0; i < deviceIds.length; i += 1000) {
      const rows = await this.db
        .selectFrom('device_config')
        .select(['device_id', 'digest'])
        .where('device_id', 'in', deviceIds.slice(i, i + 1000))
        .execute();
      for (const r of rows) out.set(r.device_id, r.digest);
    }
    return out;
  }

  async deviceStates(): Promise<DeviceConfigRow[]> {
    return this.db.selectFrom('device_config').selectAll().execute();
  }

  /** The commit a device should run (and the digest of what it is sent). */
  async recordState(deviceId: string, commitSha: string, digest: string): Promise<void> {
    await this.db
      .insertInto('device_config')
      .values({ device_id: deviceId, commit_sha: commitSha, digest, device_commit_sha: null, applied_at: null })
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ commit_sha: commitSha, digest }))
      .execute();
  }

  /** The commit a device's agent reports it applied. */
  async recordApplied(deviceId: string, commitSha: string, at: string): Promise<void> {
    await this.db
      .insertInto('device_config')
      .values({ device_id: deviceId, commit_sha: null, digest: null, device_commit_sha: commitSha, applied_at: at })
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ device_commit_sha: commitSha, applied_at: at }))
      .execute();
  }

  /** The commit a device should run; undefined when none is recorded. */
  async currentCommit(deviceId: string): Promise<string | null | undefined> {
    return (await this.db.selectFrom('device_config').select('commit_sha').where('device_id', '=', deviceId).executeTakeFirst())?.commit_sha;
  }

  async deleteStates(deviceIds: string[]): Promise<void> {
    for (let i = 0; i < deviceIds.length; i += ID_BATCH)
      await this.db
        .deleteFrom('device_config')
        .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
        .execute();
  }
}

/** Levels keyed by `type:id`, from rows of config_entities. */
export function levelsOf(rows: EntityRow[]): Map<string, Map<string, OwnBundle>> {
  const out = new Map<string, Map<string, OwnBundle>>();
  for (const row of rows) {
    const key = `${row.entity_type}:${row.entity_id}`;
    let m = out.get(key);
    if (!m) out.set(key, (m = new Map()));
    m.set(row.bundle, ownBundleOf(row));
  }
  return out;
}

export function level(type: EntityType, id: string, title: string, bundles: Map<string, Map<string, OwnBundle>>): Level {
  return { type, id, title, bundles: bundles.get(`${type}:${id}`) ?? new Map() };
}
