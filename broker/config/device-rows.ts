/**
 * What other domains read and remove of a device's configuration state (`device_config`: the commit
 * it should run, the one its agent last applied). The config domain owns the table
 * (broker/db/owners.ts); this module imports no other domain, so any may ask it without a cycle.
 */
import type { Db } from '../db/database.js';

/** Ids per `IN (...)` query: well under SQLite's and PostgreSQL's parameter limits. */
const ID_BATCH = 500;

export interface DeviceConfigState {
  device_id: string;
  /** The commit the device should run; null before its first rendering. */
  commit_sha: string | null;
  /** The commit its agent last reported applied; null before it did. */
  device_commit_sha: string | null;
  applied_at: string | null;
}

/** The configuration state of these devices (every device's when `deviceIds` is undefined), one query per batch of ids. */
export async function deviceConfigStates(db: Db, deviceIds?: string[]): Promise<DeviceConfigState[]> {
  const q = () => db.selectFrom('device_config').select(['device_id', 'commit_sha', 'device_commit_sha', 'applied_at']);
  if (deviceIds === undefined) return q().execute();
  const out: DeviceConfigState[] = [];
  for (let i = 0; i < deviceIds.length; i += ID_BATCH)
    out.push(
      ...(await q()
        .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
        .execute()),
    );
  return out;
}

/** Removes the configuration state of these devices (a device being removed), in the caller's transaction. */
export async function deleteDeviceConfigStates(trx: Db, deviceIds: string[]): Promise<void> {
  for (let i = 0; i < deviceIds.length; i += ID_BATCH)
    await trx
      .deleteFrom('device_config')
      .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
      .execute();
}
