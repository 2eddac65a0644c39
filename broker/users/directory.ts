/**
 * What other domains ask of users and their roles: the users domain owns those tables
 * (broker/db/owners.ts), and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };

/** First and last names of these users by id (500 ids a query); unknown ids are left out. */
export async function userNames(db: Db, ids: readonly string[]): Promise<Map<string, { id: string; fname: string; lname: string }>> {
  const out = new Map<string, { id: string; fname: string; lname: string }>();
  const unique = [...new Set(ids)];
  for (let i = 0; i < unique.length; i += 500)
    for (const u of await db
      .selectFrom('users')
      .select(['id', 'fname', 'lname'])
      .where('id', 'in', unique.slice(i, i + 500))
      .execute())
      out.set(u.id, u);
  return out;
}
