import net from 'node:net';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { Db } from '../db/database.js';
import { HealthService } from './service.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

function pgAt(port: number, max = 1): Db {
  const db = new Kysely({
    dialect: new PostgresDialect({ pool: new pg.Pool({ host: '127.0.0.1', port, user: 'x', database: 'x', max, connectionTimeoutMillis: 1000 }) }),
  }) as unknown as Db;
  cleanup.push(() => db.destroy().catch(() => {}));
  return db;
}

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as net.AddressInfo).port;
}

describe('health', () => {
  it('a database that refuses connections: not ready, reason database', async () => {
    // A port that was free a moment ago: nothing listens there.
    const free = net.createServer();
    const port = await new Promise<number>((resolve) => free.listen(0, '127.0.0.1', () => resolve((free.address() as net.AddressInfo).port)));
    await new Promise<void>((resolve) => free.close(() => resolve()));
    const report = await new HealthService({ db: pgAt(port) }).check();
    expect(report).toMatchObject({ ok: false, broker_id: null, reasons: ['database'], checks: { database: 'failed', cluster: 'off' } });
  });

  it('a database that accepts but never answers: not ready once the timeout passes', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((s) => sockets.push(s));
    const port = await listen(silent);
    const health = new HealthService({ db: pgAt(port, 5), timeoutMs: 200 });
    cleanup.push(() => sockets.forEach((s) => s.destroy()));
    const report = await health.check();
    expect(report.ok).toBe(false);
    expect(report.checks.database).toBe('failed');
    // The next checks wait on the same pending probe: one connection, not one per check.
    const [again, third] = await Promise.all([health.check(), health.check()]);
    expect([again.checks.database, third.checks.database]).toEqual(['failed', 'failed']);
    expect(sockets).toHaveLength(1);
  });

  it('draining is reported beside a lost database', async () => {
    const health = new HealthService({ db: pgAt(1), timeoutMs: 200 });
    expect(health.isDraining).toBe(false);
    health.drain();
    const report = await health.check();
    expect(report.reasons).toEqual(['draining', 'database']);
    expect(health.isDraining).toBe(true);
  });
});
