import type { Db } from '../db/database.js';
import type { BootstrapKeysTable, RevokedDevicesTable } from '../db/schema.js';

/** Persistence of enrolment: bootstrap keys and revoked device keys (devices as they enrol: devices/directory.ts). */
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

  async updateKey(keyHash: string, patch: Partial<Pick<BootstrapKeysTable, 'group_id' | 'auto_accept' | 'label' | 'expires_at'>>): Promise<void> {
    if (Object.keys(patch).length === 0) return;
    await this.db.updateTable('bootstrap_keys').set(patch).where('key_hash', '=', keyHash).execute();
  }

  async deleteKey(keyHash: string): Promise<boolean> {
    const r = await this.db.deleteFrom('bootstrap_keys').where('key_hash', '=', keyHash).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
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
