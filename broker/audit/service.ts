import type { AuditEntry, ListPage } from '../../shared/api-types.js';
import type { Db } from '../db/database.js';

export interface AuditActor {
  id: string;
  email: string;
}

export interface RemoteAuditStart {
  event: string; // e.g. remote.console
  user: AuditActor;
  deviceId: string;
  action: string; // console | tunnel | copy | reload
  options: Record<string, unknown>;
  allowed: boolean;
  reason: string;
  ip: string;
  source: 'api' | 'web' | 'cli' | 'ssh' | 'qbee';
  sessionId?: string;
}

export interface AuditQuery {
  device_id?: string;
  user_id?: string;
  action?: string;
  result?: string;
  event?: string;
  from?: string;
  to?: string;
  offset: number;
  items_per_page: number;
}

/**
 * The audit trail. Remote-access attempts are written before the session starts (a failed write
 * refuses the session); changes made through the API are written after they succeed.
 */
export class AuditService {
  constructor(private readonly db: Db) {}

  async recordChange(entry: {
    event: string;
    user?: AuditActor;
    action: string;
    deviceId?: string;
    options: unknown;
    ip: string;
    result?: string;
    reason?: string;
  }): Promise<void> {
    await this.db
      .insertInto('audit')
      .values({
        ts: new Date().toISOString(),
        event: entry.event,
        user_id: entry.user?.id ?? null,
        user_email: entry.user?.email ?? null,
        device_id: entry.deviceId ?? null,
        action: entry.action,
        options: JSON.stringify(entry.options ?? {}),
        result: entry.result ?? 'ok',
        reason: entry.reason ?? null,
        source_ip: entry.ip,
        source: 'api',
        session_id: null,
        ended_at: null,
        duration_ms: null,
        bytes_in: null,
        bytes_out: null,
      })
      .execute();
  }

  /** Writes a remote-access attempt; returns the entry id to close it later. */
  async recordRemoteStart(entry: RemoteAuditStart): Promise<number> {
    const row = await this.db
      .insertInto('audit')
      .values({
        ts: new Date().toISOString(),
        event: `${entry.event}.${entry.allowed ? 'start' : 'denied'}`,
        user_id: entry.user.id,
        user_email: entry.user.email,
        device_id: entry.deviceId,
        action: entry.action,
        options: JSON.stringify(entry.options),
        result: entry.allowed ? 'allowed' : 'denied',
        reason: entry.reason,
        source_ip: entry.ip,
        source: entry.source,
        session_id: entry.sessionId ?? null,
        ended_at: null,
        duration_ms: null,
        bytes_in: null,
        bytes_out: null,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    return Number(row.id);
  }

  /** Closes a remote-access entry with its duration and bytes each way. */
  async recordRemoteEnd(id: number, end: { durationMs: number; bytesIn: number; bytesOut: number; reason?: string }): Promise<void> {
    await this.db
      .updateTable('audit')
      .set({
        ended_at: new Date().toISOString(),
        duration_ms: Math.round(end.durationMs),
        bytes_in: end.bytesIn,
        bytes_out: end.bytesOut,
        ...(end.reason ? { reason: end.reason } : {}),
      })
      .where('id', '=', id)
      .execute();
  }

  async list(q: AuditQuery): Promise<ListPage<AuditEntry>> {
    let query = this.db.selectFrom('audit');
    if (q.device_id) query = query.where('device_id', '=', q.device_id);
    if (q.user_id) query = query.where('user_id', '=', q.user_id);
    if (q.action) query = query.where('action', '=', q.action);
    if (q.result) query = query.where('result', '=', q.result);
    if (q.event) query = query.where('event', 'like', `${q.event.replace(/[%_]/g, '')}%`);
    if (q.from) query = query.where('ts', '>=', q.from);
    if (q.to) query = query.where('ts', '<=', q.to);
    const { total } = await query.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
    const rows = await query.selectAll().orderBy('id', 'desc').offset(q.offset).limit(q.items_per_page).execute();
    return {
      total: Number(total),
      items: rows.map((r) => ({ ...r, id: Number(r.id), options: JSON.parse(r.options) as unknown })),
    };
  }
}
