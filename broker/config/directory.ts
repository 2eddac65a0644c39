/**
 * What other domains may ask of the configuration domain's tables (device_config, config_changes):
 * the configuration domain owns them (broker/db/owners.ts), and these are its answers, so that no
 * other domain writes SQL on them.
 */
import { sql, type Db } from '../db/database.js';

/** A device's configuration state: the commit it should run, and the commit its agent last applied and when. */
export interface DeviceConfigState {
  commit_sha: string | null;
  device_commit_sha: string | null;
  applied_at: string | null;
}

/** The configuration state by device id: of these devices (500 ids a query), or of every device without `ids`. */
export async function deviceConfigStates(db: Db, ids?: readonly string[]): Promise<Map<string, DeviceConfigState>> {
  const query = () => db.selectFrom('device_config').select(['device_id', 'commit_sha', 'device_commit_sha', 'applied_at']);
  const out = new Map<string, DeviceConfigState>();
  const add = (rows: ({ device_id: string } & DeviceConfigState)[]) => {
    for (const { device_id, ...state } of rows) out.set(device_id, state);
  };
  if (!ids) add(await query().execute());
  else
    for (let i = 0; i < ids.length; i += 500)
      add(
        await query()
          .where('device_id', 'in', ids.slice(i, i + 500))
          .execute(),
      );
  return out;
}

/**
 * The commits holding a change whose sha matches a LIKE pattern (`\` escapes), as a subquery for
 * `where('sha', 'in', …)` (the audit trail's search by change).
 */
export function commitsWithChangeLike(db: Db, pattern: string) {
  return db
    .selectFrom('config_changes')
    .select('config_changes.commit_sha')
    .where(sql<boolean>`config_changes.sha like ${pattern} escape '\\'`);
}
