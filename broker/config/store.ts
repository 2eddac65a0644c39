/** Queries of the configuration domain: staged and committed changes, commits, entities' own bundles. */
import type { Selectable } from 'kysely';
import type { Db } from '../db/database.js';
import type { ConfigChangesTable, ConfigEntitiesTable } from '../db/schema.js';
import type { BundleData } from './bundles.js';
import type { EntityType, Level, OwnBundle } from './render.js';

export type ChangeRow = Selectable<ConfigChangesTable>;
export type EntityRow = Selectable<ConfigEntitiesTable>;

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

  async staged(userId: string): Promise<ChangeRow[]> {
    return this.db.selectFrom('config_changes').selectAll().where('user_id', '=', userId).where('status', '=', 'new').orderBy('seq').execute();
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
