import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { RefusalBudget } from './refusals.js';
import { AuditService, type RefusedAttempt } from './service.js';

const DEVICE = 'd'.repeat(64);
const refused = (over: Partial<RefusedAttempt> = {}): RefusedAttempt => ({
  principal: { user: { id: 'u1', email: 'op@example.com' }, sessionId: 's1' },
  deviceId: DEVICE,
  action: 'tunnel',
  options: { target: 'localhost:99999' },
  reason: 'invalid request: the tunnel target must be host:port',
  ip: '192.0.2.7',
  source: 'qbee',
  ...over,
});

/** A logger that keeps what it is told. */
function keeping() {
  const lines: { level: string; obj: object; msg: string }[] = [];
  return {
    lines,
    logger: {
      warn: (obj: object, msg: string) => void lines.push({ level: 'warn', obj, msg }),
      error: (obj: object, msg: string) => void lines.push({ level: 'error', obj, msg }),
    },
  };
}

describe('AuditService.recordRefusedAttempt: one way every entry point audits an attempt refused before any session', () => {
  let store: Store;
  let dir = '';

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-refused-'));
    store = await openStore(`sqlite:${path.join(dir, 'fleet.sqlite')}`, '');
  });
  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const rows = () =>
    store.db
      .selectFrom('audit')
      .select(['event', 'user_id', 'user_email', 'device_id', 'action', 'options', 'result', 'reason', 'source_ip', 'source', 'session_id'])
      .orderBy('id')
      .execute();

  it('writes remote.<action>.denied with the caller, the device, the options and the reason; no live session is owned', async () => {
    const audit = new AuditService(store.db, store.dialect, { brokerId: 'b1' });
    await audit.recordRefusedAttempt(refused());
    const [row] = await rows();
    expect(row).toMatchObject({
      event: 'remote.tunnel.denied',
      user_id: 'u1',
      user_email: 'op@example.com',
      device_id: DEVICE,
      action: 'tunnel',
      result: 'denied',
      reason: 'invalid request: the tunnel target must be host:port',
      source_ip: '192.0.2.7',
      source: 'qbee',
      session_id: 's1',
    });
    expect(JSON.parse(String(row.options))).toEqual({ target: 'localhost:99999' });
    expect(await store.db.selectFrom('remote_session_owners').selectAll().execute()).toEqual([]);
  });

  it('names its own event where the attempt is not an action (a refused upgrade or sign-in), and an unknown caller by address only', async () => {
    const audit = new AuditService(store.db, store.dialect, { brokerId: 'b1' });
    await audit.recordRefusedAttempt(
      refused({ event: 'remote.qbee', action: 'connect', principal: undefined, options: {}, reason: 'unauthorized: bad token' }),
    );
    expect(await rows()).toMatchObject([
      { event: 'remote.qbee.denied', action: 'connect', user_id: null, user_email: null, session_id: null, source_ip: '192.0.2.7' },
    ]);
  });

  it('counts against its source’s refusal rate like every refusal: past it, nothing more is written one by one', async () => {
    const audit = new AuditService(store.db, store.dialect, { brokerId: 'b1', refusals: new RefusalBudget(2) });
    for (let i = 0; i < 5; i++) await audit.recordRefusedAttempt(refused({ options: { i } }));
    expect(await rows()).toHaveLength(2);
  });

  it('never throws: a write the database refuses is logged, and the refusal stands', async () => {
    await sql`create trigger refuse_boom before insert on audit when new.reason = 'boom' begin select raise(abort, 'refused'); end`.execute(store.db);
    const { lines, logger } = keeping();
    const audit = new AuditService(store.db, store.dialect, { brokerId: 'b1', logger });
    await expect(audit.recordRefusedAttempt(refused({ reason: 'boom' }))).resolves.toBeUndefined();
    expect(lines).toMatchObject([
      { level: 'error', msg: 'refused remote-access attempt not audited', obj: { event: 'remote.tunnel', source: 'qbee', deviceId: DEVICE } },
    ]);
    expect(await rows()).toEqual([]);
  });
});
