import type { Db } from '../db/database.js';
import type { BootstrapKeysTable, DevicesTable, RevokedDevicesTable } from '../db/schema.js';

/** Persistence of enrolment: bootstrap keys, devices as they enrol, and revoked device keys. */
export class EnrolStore {
  constructor(readonly db: Db) {}

  transaction<T>(run: (trx: Db) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(run);
  }

  // ---- bootstrap keys ------------------------------------------------------------------------

  async insertKey(row: BootstrapKeysTable): Promise<void> {
    await this.db.insertInto('bootstrap_keys').values(row).execute();
  }

  /** A key by its hash (what agents present) or by its public id (what lists show). */
  async findKey(keyHash: string, keyId: string): Promise<BootstrapKeysTable | undefined> {
    return this.db
      .selectFrom('bootstrap_keys')
      .selectAll()
      .where((eb) => eb.or([eb('key_hash', '=', keyHash), eb('key_id', '=', keyId)]))
      .executeTakeFirst();
  }

  async keyByHash(keyHash: string): Promise<BootstrapKeysTable | undefined> {
    return this.db.selectFrom('bootstrap_keys').selectAll().where('key_hash', '=', keyHash).executeTakeFirst();
  }

  async keyById(keyId: string): Promise<BootstrapKeysTable | undefined> {
    return this.db.selectFrom('bootstrap_keys').selectAll().where('key_id', '=', keyId).executeTakeFirst();
  }

  async listKeys(offset: number, limit: number): Promise<{ rows: BootstrapKeysTable[]; total: number }> {
    const rows = await this.db.selectFrom('bootstrap_keys').selectAll().orderBy('created_at').orderBy('key_id').offset(offset).limit(limit).execute();
    const { total } = await this.db
      .selectFrom('bootstrap_keys')
      .select((eb) => eb.fn.countAll<number>().as('total'))
      .executeTakeFirstOrThrow();
    return { rows, total: Number(total) };
  }

  /** Devices (pending and approved) enrolled with each of these keys, by key_id. */
  async deviceCounts(keyIds: string[]): Promise<Map<string, number>> {
    if (keyIds.length === 0) return new Map();
    const rows = await this.db
      .selectFrom('devices')
      .select(['bootstrap_key', (eb) => eb.fn.countAll<number>().as('n')])
      .where('bootstrap_key', 'in', keyIds)
      .groupBy('bootstrap_key')
      .execute();
    return new Map(rows.map((r) => [r.bootstrap_key as string, Number(r.n)]));
  }

  async updateKey(keyHash: string, patch: Partial<Pick<BootstrapKeysTable, 'group_id' | 'auto_accept' | 'label' | 'expires_at'>>): Promise<void> {
    if (Object.keys(patch).length === 0) return;
    await this.db.updateTable('bootstrap_keys').set(patch).where('key_hash', '=', keyHash).execute();
  }

  async deleteKey(keyHash: string): Promise<boolean> {
    const r = await this.db.deleteFrom('bootstrap_keys').where('key_hash', '=', keyHash).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  async isGroup(db: Db, nodeId: string): Promise<boolean> {
    const row = await db.selectFrom('nodes').select('type').where('node_id', '=', nodeId).executeTakeFirst();
    return row?.type === 'group';
  }

  // ---- devices -------------------------------------------------------------------------------

  async device(db: Db, deviceId: string): Promise<DevicesTable | undefined> {
    return db.selectFrom('devices').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
  }

  /** Inserts a device unless one with this id exists (a parallel enrolment of the same key). */
  /** Inserts a new device; false when one with this id was there already (nothing changed). */
  async insertDevice(db: Db, row: DevicesTable): Promise<boolean> {
    const inserted = await db
      .insertInto('devices')
      .values(row)
      .onConflict((oc) => oc.column('device_id').doNothing())
      .returning('device_id')
      .executeTakeFirst();
    return inserted !== undefined;
  }

  async touchDevice(db: Db, deviceId: string, patch: Partial<Pick<DevicesTable, 'hostname' | 'last_ip' | 'last_seen' | 'agent_version'>>): Promise<void> {
    if (Object.keys(patch).length === 0) return;
    await db.updateTable('devices').set(patch).where('device_id', '=', deviceId).execute();
  }

  /** pending → approved; false when the device was not pending (someone else decided first). */
  async markApproved(db: Db, deviceId: string, at: string): Promise<boolean> {
    const r = await db
      .updateTable('devices')
      .set({ state: 'approved', approved_at: at })
      .where('device_id', '=', deviceId)
      .where('state', '=', 'pending')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async deletePending(db: Db, deviceId: string): Promise<boolean> {
    const r = await db.deleteFrom('devices').where('device_id', '=', deviceId).where('state', '=', 'pending').executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  async listPending(offset: number, limit: number): Promise<{ rows: DevicesTable[]; total: number }> {
    const rows = await this.db
      .selectFrom('devices')
      .selectAll()
      .where('state', '=', 'pending')
      .orderBy('created_at')
      .orderBy('device_id')
      .offset(offset)
      .limit(limit)
      .execute();
    const { total } = await this.db
      .selectFrom('devices')
      .select((eb) => eb.fn.countAll<number>().as('total'))
      .where('state', '=', 'pending')
      .executeTakeFirstOrThrow();
    return { rows, total: Number(total) };
  }

  // ---- revoked keys --------------------------------------------------------------------------

  async revoke(db: Db, row: RevokedDevicesTable): Promise<void> {
    await db
      .insertInto('revoked_devices')
      .values(row)
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ reason: row.reason, revoked_at: row.revoked_at, hostname: row.hostname }))
      .execute();
  }

  async revoked(deviceId: string): Promise<RevokedDevicesTable | undefined> {
    return this.db.selectFrom('revoked_devices').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
  }
}
