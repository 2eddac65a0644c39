/**
 * What the audit trail asks of configuration commits: the config domain owns their tables
 * (broker/db/owners.ts), so the audit's search by a change's sha is written here.
 */
import { sql, type Db } from '../db/database.js';

/**
 * The commit shas with a change whose sha matches the LIKE `pattern` (escape '\\'), as a subquery
 * the audit's listing filters by: one query with it.
 */
export function commitShasWithChangeLike(db: Db, pattern: string) {
  return db
    .selectFrom('config_changes')
    .select('config_changes.commit_sha')
    .where(sql<boolean>`config_changes.sha like ${pattern} escape '\\'`);
}
