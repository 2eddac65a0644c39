/**
 * What sign-in keeps about a user, removed with them: their sessions, open challenges, password
 * links and recovery codes. The users domain calls it inside the transaction that removes the user.
 */
import type { Db } from '../db/database.js';

/** Deletes the user's sign-in rows, on the caller's transaction. */
export async function removeSignInRows(db: Db, userId: string): Promise<void> {
  await db.deleteFrom('sessions').where('user_id', '=', userId).execute();
  await db.deleteFrom('challenges').where('user_id', '=', userId).execute();
  await db.deleteFrom('password_tokens').where('user_id', '=', userId).execute();
  await db.deleteFrom('recovery_codes').where('user_id', '=', userId).execute();
}
