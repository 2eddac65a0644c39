/**
 * What keeping shared state in the database costs (`npm run bench -- shared`): a rate-limit count and
 * a ticket issued and redeemed, as database statements on SQLite and PostgreSQL, against the in-memory
 * maps brokers used before (the same algorithm, measured in the same run); and a whole password
 * sign-in over HTTP, whose scrypt check dwarfs both.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { RateLimiter } from '../broker/auth/ratelimit.js';
import { dropSchema, openStore, type Store } from '../broker/db/database.js';
import { TicketStore } from '../broker/remote/tickets.js';
import { ADMIN, PG_URL, startTestBroker } from '../test/support/broker.js';

const OPS = Number(process.env.BENCH_SHARED_OPS ?? 2000);
const SIGN_INS = Number(process.env.BENCH_SIGN_INS ?? 40);

/** Microseconds per call of `op`, run `n` times one after another. */
async function perOp(n: number, op: (i: number) => unknown): Promise<number> {
  for (let i = 0; i < Math.min(50, n); i++) await op(i); // warm-up
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await op(i);
  return Number(process.hrtime.bigint() - start) / 1000 / n;
}

/** The fixed-window counter brokers kept in memory before (per broker). */
function memoryCounter(): (key: string) => number {
  const windows = new Map<string, { start: number; count: number }>();
  return (key) => {
    const now = Date.now();
    let w = windows.get(key);
    if (!w || now - w.start >= 900_000) windows.set(key, (w = { start: now, count: 0 }));
    return (w.count += 1);
  };
}

/** The ticket map brokers kept in memory before: issue, then redeem once. */
function memoryTickets(): () => void {
  const entries = new Map<string, { token: string; expiresAt: number }>();
  const digest = (t: string) => crypto.createHash('sha256').update(t).digest('hex');
  return () => {
    const ticket = crypto.randomBytes(24).toString('base64url');
    entries.set(digest(ticket), { token: 'token', expiresAt: Date.now() + 60_000 });
    const key = digest(ticket);
    const e = entries.get(key);
    entries.delete(key);
    return e;
  };
}

async function storeFigures(
  name: string,
  store: Store,
  log: (line: string) => void,
  baseline: { count: number; ticket: number },
): Promise<{ count: number; ticket: number }> {
  const limiter = new RateLimiter(store, 'bench', 1_000_000, 900_000);
  const count = await perOp(OPS, (i) => limiter.count(`ip:10.0.${i % 256}.1`));
  const tickets = new TicketStore(store.db, 32, 1_000_000);
  const ticket = await perOp(OPS / 4, async (i) => {
    const { ticket: t } = await tickets.issue('token', `user-${i % 100}`);
    await tickets.redeem(t);
  });
  log(`${name}: rate-limit count ${count.toFixed(1)} µs (${(count / baseline.count).toFixed(0)}× the in-memory map)`);
  log(`${name}: ticket issue + redeem ${ticket.toFixed(1)} µs (${(ticket / baseline.ticket).toFixed(0)}× the in-memory map)`);
  return { count, ticket };
}

export async function benchShared(log: (line: string) => void): Promise<void> {
  const counter = memoryCounter();
  const baseCount = await perOp(OPS * 10, (i) => counter(`ip:10.0.${i % 256}.1`));
  const issueRedeem = memoryTickets();
  const baseTicket = await perOp(OPS * 10, () => issueRedeem());
  log(`in memory (before): rate-limit count ${baseCount.toFixed(2)} µs, ticket issue + redeem ${baseTicket.toFixed(2)} µs`);
  const baseline = { count: baseCount, ticket: baseTicket };

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-'));
  const sqlite = await openStore(`sqlite:${path.join(dir, 'bench.sqlite')}`);
  let onSqlite: { count: number; ticket: number };
  try {
    onSqlite = await storeFigures('SQLite', sqlite, log, baseline);
  } finally {
    await sqlite.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const schema = `bench_${crypto.randomBytes(4).toString('hex')}`;
  let onPostgres: { count: number; ticket: number } | undefined;
  try {
    const pg = await openStore(PG_URL, schema);
    try {
      onPostgres = await storeFigures('PostgreSQL', pg, log, baseline);
    } finally {
      await pg.close();
      await dropSchema(PG_URL, schema);
    }
  } catch (err) {
    log(`PostgreSQL: not available (${(err as Error).message})`);
  }

  // A whole sign-in: scrypt plus the rate-limit statements (6 small writes per successful sign-in:
  // count and give back per address, per (account, address) and per account).
  for (const database of ['sqlite', 'postgres'] as const) {
    const t = await startTestBroker({ database });
    try {
      const ms =
        (await perOp(SIGN_INS, async () => {
          const r = await t.api('POST', '/api/v2/login', { body: ADMIN });
          if (r.status !== 200) throw new Error(`sign-in answered ${r.status}`);
        })) / 1000;
      const per = database === 'sqlite' ? onSqlite.count : onPostgres?.count;
      const limits = per === undefined ? undefined : (6 * per) / 1000;
      log(
        `password sign-in over HTTP (${database}): ${ms.toFixed(1)} ms` +
          (limits === undefined ? '' : `, of which its 6 rate-limit statements ≈ ${limits.toFixed(2)} ms (${((100 * limits) / ms).toFixed(1)}%)`),
      );
    } finally {
      await t.close();
    }
  }
}
