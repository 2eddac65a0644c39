/**
 * What other domains ask of users and their roles: the users domain owns those tables
 * (broker/db/owners.ts), and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };

/** The email of each of these users (a user no longer there is missing from the map): one query per 500 ids. */
export async function userEmails(db: Db, userIds: string[]): Promise<Map<string, string>> {
  const ids = [...new Set(userIds)];
  const out = new Map<string, string>();
  for (let i = 0; i < ids.length; i += 500)
    for (const u of await db
      .selectFrom('users')
      .select(['id', 'email'])
      .where('id', 'in', ids.slice(i, i + 500))
      .execute())
      out.set(u.id, u.email);
  return out;
}
