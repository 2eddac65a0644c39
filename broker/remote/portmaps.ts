import crypto from 'node:crypto';
import type { Portmap } from '../../shared/api-types.js';
import type { Db } from '../db/database.js';
import type { PortmapsTable } from '../db/schema.js';

/** A port preset as the API shows it: declared once for the broker and the console. */
export type { Portmap } from '../../shared/api-types.js';

export interface PortmapInput {
  target: string;
  name: string;
  proto: 'tcp' | 'udp';
  port: number;
  dst: string;
}

function record(row: PortmapsTable): Portmap {
  return { id: row.id, target: row.target, name: row.name, proto: row.proto as Portmap['proto'], port: Number(row.port), dst: row.dst };
}

/** Port presets (`portmaps` table): named tunnel targets for a device, a group, a tag or every device. */
export class PortmapStore {
  constructor(private readonly db: Db) {}

  async all(): Promise<Portmap[]> {
    const rows = await this.db.selectFrom('portmaps').selectAll().orderBy('name').orderBy('port').orderBy('id').execute();
    return rows.map(record);
  }

  async find(id: string): Promise<Portmap | undefined> {
    const row = await this.storedRow(id);
    return row && record(row);
  }

  /** The preset's row as stored, with who created it and when (what the audit compares before and after a change). */
  async storedRow(id: string): Promise<PortmapsTable | undefined> {
    return this.db.selectFrom('portmaps').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async insert(input: PortmapInput, userId: string): Promise<Portmap> {
    const row: PortmapsTable = { id: crypto.randomUUID(), ...input, created_at: new Date().toISOString(), created_by: userId };
    await this.db.insertInto('portmaps').values(row).execute();
    return record(row);
  }

  async update(id: string, patch: Partial<PortmapInput>): Promise<Portmap | undefined> {
    if (Object.keys(patch).length > 0) await this.db.updateTable('portmaps').set(patch).where('id', '=', id).execute();
    return this.find(id);
  }

  async remove(id: string): Promise<boolean> {
    const result = await this.db.deleteFrom('portmaps').where('id', '=', id).executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }
}
