/**
 * The cost of a session's open, pinned: the system calls of its handshake, the statements of its
 * audit trail, and a burst of concurrent opens written to one intact chain with one start and one
 * end each (on SQLite and on PostgreSQL, with the api-sqlite and api-postgres projects).
 */
import net from 'node:net';
import { Duplex, Writable } from 'node:stream';
import { DefaultQueryCompiler } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { eventually } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { connectRemote, type RecordedSession } from '../support/remote-ws.js';

let t: TestBroker;
const fakes = new FakeAgents();
let agent: FakeAgent;
let device: string;
let token: string;
let sink: net.Server;
let port: number;

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator });
  device = await t.addDevice({ name: 'opens-one' });
  agent = await fakes.attach(device, t.dataDir);
  ({ token } = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/tunnel(proto=tcp;dst=127.0.0.1)'] }]));
  // The tunnels' far end: accepts and holds each connection until the tunnel ends it.
  sink = net.createServer((socket) => socket.on('error', () => {}).resume());
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  port = (sink.address() as net.AddressInfo).port;
});

afterAll(async () => {
  await agent?.close();
  await t?.close();
  await new Promise((resolve) => sink?.close(resolve));
});

/** Counts the writes handed to the kernel on each upgraded socket of the broker (a write, or a writev of corked chunks). */
function countUpgradeWrites(): { writes: number[]; stop(): void } {
  const writes: number[] = [];
  const listener = (_req: unknown, socket: Duplex) => {
    const i = writes.push(0) - 1;
    const s = socket as Duplex & { _write: Duplex['_write']; _writev?: Duplex['_writev'] };
    const write = s._write.bind(s);
    const writev = s._writev?.bind(s);
    s._write = (chunk, encoding, callback) => {
      writes[i] += 1;
      write(chunk, encoding, callback);
    };
    if (writev)
      s._writev = (chunks, callback) => {
        writes[i] += 1;
        writev(chunks, callback);
      };
  };
  t.broker.server.prependListener('upgrade', listener);
  return { writes, stop: () => void t.broker.server.off('upgrade', listener) };
}

async function closed(s: RecordedSession): Promise<{ code: number }> {
  s.ws.close();
  return s.closed;
}

/** Until every live session's end entry is committed (a session is listed until then). */
const allEnded = () => eventually(() => t.broker.services.remote.sessions.size === 0, 20_000, 'the sessions’ ends');

describe('a session open', () => {
  it('answers the handshake and its ready frame in one write (the code before wrote the 101, then the frame)', async () => {
    const counter = countUpgradeWrites();
    const s = connectRemote(t.url, 'tunnel', { device_id: device, port, dst: '127.0.0.1' }, token);
    try {
      await s.ready;
      expect(counter.writes).toEqual([1]);
    } finally {
      counter.stop();
      await closed(s);
      await allEnded();
    }
  });

  it('answers a denied open in one write too (101, error frame, close), and audits it as denied', async () => {
    const counter = countUpgradeWrites();
    try {
      const s = connectRemote(t.url, 'tunnel', { device_id: device, port, dst: '10.0.0.1' }, token);
      expect((await s.closed).code).toBe(4403);
      expect(s.frames).toEqual([expect.objectContaining({ type: 'error', code: 403, error: 'forbidden' })]);
      expect(counter.writes).toEqual([1]);
    } finally {
      counter.stop();
    }
    const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}&event=remote.tunnel.denied`, { token: t.adminToken });
    expect(audit.body.items).toEqual([expect.objectContaining({ result: 'denied', options: expect.objectContaining({ dst: '10.0.0.1' }) })]);
  });

  it('opened and closed alone, is the audit trail’s statements only: a start and an end, each in a transaction of its own', async () => {
    // Warm: the caller's sign-in session and roles are cached after their first use.
    await closed(await readyTunnel());
    await allEnded();
    const counts: number[] = [];
    for (let i = 0; i < 5; i++) {
      const before = t.broker.services.store.statements();
      await closed(await readyTunnel());
      await allEnded();
      counts.push(t.broker.services.store.statements() - before);
    }
    // The broker's background work (presence, caches' refresh) may add statements to some: the fewest is the session's.
    // Start: begin with the chain's lock, head, insert, owner, commit; end: begin with the lock, release,
    // ended?, head, insert, commit. The code before sent the lock as a statement of its own: 13.
    expect(Math.min(...counts)).toBe(11);
  });

  it('opened and closed alone, after one before it, compiles no statement: its audit statements are sent again compiled', async () => {
    await closed(await readyTunnel());
    await allEnded();
    const compiles = vi.spyOn(DefaultQueryCompiler.prototype, 'compileQuery');
    const counts: number[] = [];
    try {
      for (let i = 0; i < 5; i++) {
        const before = compiles.mock.calls.length;
        await closed(await readyTunnel());
        await allEnded();
        counts.push(compiles.mock.calls.length - before);
      }
    } finally {
      compiles.mockRestore();
    }
    // The fewest is the session's (as above). The code before built and compiled 7: the start's begin,
    // INSERT, owner and commit, the end's begin, INSERT and commit.
    expect(Math.min(...counts)).toBe(0);
  });

  it('closed by its client, ends none of its streams again once finished (ws did three times a session, each building an error)', async () => {
    // The broker's upgraded sockets and its ws parsers (the test's client's are left out: not the broker's work).
    const sockets = new Set<unknown>();
    const listener = (_req: unknown, socket: Duplex) => void sockets.add(socket);
    t.broker.server.prependListener('upgrade', listener);
    let wasted = 0;
    const originals = [Writable.prototype.end, Duplex.prototype.end] as const;
    const wrap = (end: (...args: unknown[]) => unknown) =>
      function (this: Writable & { _isServer?: boolean }, ...args: unknown[]) {
        if ((sockets.has(this) || this._isServer === true) && (this.writableFinished || this.destroyed)) wasted += 1;
        return end.apply(this, args);
      };
    Writable.prototype.end = wrap(originals[0] as never) as never;
    Duplex.prototype.end = wrap(originals[1] as never) as never;
    try {
      for (let i = 0; i < 5; i++) {
        const s = await readyTunnel();
        await closed(s);
      }
      await allEnded();
      expect(sockets.size).toBe(5);
      expect(wasted).toBe(0);
    } finally {
      Writable.prototype.end = originals[0];
      Duplex.prototype.end = originals[1];
      t.broker.server.off('upgrade', listener);
    }
  });

  it('a burst of concurrent opens: each session one start and one end, in groups, and the chain verifies', async () => {
    const sessions = 40;
    const before = t.broker.services.store.statements();
    const opened = await Promise.all(Array.from({ length: sessions }, () => readyTunnel()));
    await Promise.all(opened.map(closed));
    await allEnded();
    const statements = t.broker.services.store.statements() - before;
    // Never more than each entry alone (above); fewer as entries share a transaction.
    expect(statements).toBeLessThanOrEqual(sessions * 11);
    const starts = await entries('remote.tunnel.start');
    const ends = await entries('remote.tunnel.end');
    const burst = starts.slice(0, sessions).map((e) => e.id);
    expect(new Set(ends.map((e) => e.ref_id)).size).toBe(ends.length);
    for (const id of burst) expect(ends.filter((e) => e.ref_id === id)).toHaveLength(1);
    const verify = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(verify.body).toMatchObject({ ok: true });
  });
});

async function readyTunnel(): Promise<RecordedSession> {
  const s = connectRemote(t.url, 'tunnel', { device_id: device, port, dst: '127.0.0.1' }, token);
  await s.ready;
  return s;
}

/** This device's entries of one event, newest first. */
async function entries(event: string): Promise<{ id: number; ref_id: number | null }[]> {
  const r = await t.api('GET', `/api/v2/commitlist?device_id=${device}&event=${event}&items_per_page=100`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}
