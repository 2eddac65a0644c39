import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import { loadConfig } from '../environment.js';
import { createLogger } from '../logger.js';
import { ConsoleRecorder } from './recordings.js';
import type { ErrorFrame } from './relay.js';
import { RemoteSessions, SHUTDOWN_RECORDINGS_MS, SHUTDOWN_RELAYS_MS, type LiveRelay, type RemoteSessionsDeps } from './sessions.js';

let dir: string;
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A relay that only records how it was ended. */
class FakeRelay implements LiveRelay {
  bytesIn = 0;
  bytesOut = 0;
  aborted?: { frame: ErrorFrame; code: number; reason: string };
  private resolve!: (end: { bytesIn: number; bytesOut: number; reason: string }) => void;
  readonly done = new Promise<{ bytesIn: number; bytesOut: number; reason: string }>((r) => (this.resolve = r));
  abort(frame: ErrorFrame, code: number, reason: string): void {
    this.aborted = { frame, code, reason };
    this.resolve({ bytesIn: 0, bytesOut: 0, reason });
  }
}

/**
 * A `RemoteSessions` holding one adopted console: `relay` as its relay, `recorder` (if any) as its
 * recording; `recordRemoteEnd` is the audit's end entry.
 */
function adoptOne(
  relay: LiveRelay,
  sessionId: string,
  recorder?: ConsoleRecorder,
  recordRemoteEnd: (id: number, end: { reason: string }) => Promise<void> = async () => undefined,
  /** Other dependencies than these defaults. */
  other: Partial<Record<keyof RemoteSessionsDeps, unknown>> = {},
) {
  const principal = new Principal({ id: 'u1', email: 'u@example.com', fname: 'U', lname: 'One' }, 's1', []);
  const deps = {
    config: { trustProxy: false, dataDir: dir },
    logger: createLogger('silent'),
    auth: { authenticate: async () => principal },
    access: {},
    audit: { recordRemoteStart: async () => 1, recordRemoteEnd },
    locator: {} as AgentLocator,
    ...other,
  } as unknown as RemoteSessionsDeps;
  const sessions = new RemoteSessions(deps);
  sessions.adopt(
    {
      ok: true,
      caller: { principal, token: 't', source: 'api', ip: '127.0.0.1' },
      deviceId: 'd'.repeat(64),
      request: { action: 'console' },
      channel: {} as Channel,
      relayOptions: { kind: 'console', info: {}, ...(recorder ? { recorder } : {}) },
      auditId: 1,
      startedAt: Date.now(),
      sessionId,
      ...(recorder ? { recorder } : {}),
    },
    relay,
  );
  return sessions;
}

describe('a live console with a required recording', () => {
  it('is ended when its recording cannot keep up, rather than run unrecorded', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessions-'));
    const ends: string[] = [];
    const sessionId = '44444444-4444-4444-8444-444444444444';
    const recorder = ConsoleRecorder.open(dir, sessionId, { cols: 80, rows: 24 }, {}, createLogger('silent'), true);
    const relay = new FakeRelay();
    const sessions = adoptOne(relay, sessionId, recorder, async (_id, end) => void ends.push(end.reason));
    expect(sessions.list().map((s) => s.id)).toEqual([sessionId]);
    // A flood faster than the disk: more than the write-behind cap at once.
    const chunk = Buffer.alloc(64 * 1024, 'y');
    for (let i = 0; i < 64; i += 1) recorder.output(chunk);
    expect(relay.aborted).toMatchObject({ frame: { error: 'recording_failed' }, reason: 'required recording could not be written' });
    await expect.poll(() => ends).toEqual(['required recording could not be written']);
    expect(sessions.size).toBe(0);
  });
});

describe('a session that ends', () => {
  /** A session adopted with an audit whose end entries commit only when the test says. */
  function adopted(recordRemoteEnd: (id: number, end: { reason: string }) => Promise<void>) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessions-'));
    const sessionId = '55555555-5555-4555-8555-555555555555';
    const relay = new FakeRelay();
    return { sessions: adoptOne(relay, sessionId, undefined, recordRemoteEnd), relay, sessionId };
  }

  it('stays in the live list until its end entry is committed: a poller sees the session or its end, never neither', async () => {
    let commit!: () => void;
    const ends: string[] = [];
    const { sessions, relay, sessionId } = adopted(
      (_id, end) =>
        new Promise<void>((resolve) => {
          ends.push(end.reason);
          commit = resolve;
        }),
    );
    relay.abort({ type: 'error', code: 500, error: 'x', message: 'x' } as unknown as ErrorFrame, 4500, 'gone');
    await expect.poll(() => ends).toEqual(['gone']);
    // The end entry is being written, not committed: the session is still listed.
    await new Promise((r) => setImmediate(r));
    expect(sessions.list().map((s) => s.id)).toEqual([sessionId]);
    commit();
    await expect.poll(() => sessions.size).toBe(0);
  });

  it("an operator's end answers once the session has left the list, its end entry committed", async () => {
    let commit!: () => void;
    const { sessions, sessionId } = adopted(() => new Promise<void>((resolve) => (commit = resolve)));
    let answered = false;
    const ending = sessions.end(sessionId, { by: { id: 'u2', email: 'op@example.com', name: 'Op' } }).then((found) => {
      answered = true;
      return found;
    });
    await expect.poll(() => commit).toBeDefined();
    await new Promise((r) => setImmediate(r));
    expect(answered).toBe(false);
    expect(sessions.list().map((s) => s.id)).toEqual([sessionId]);
    commit();
    expect(await ending).toBe(true);
    expect(sessions.list()).toEqual([]);
  });

  it('leaves the list even when its end entry cannot be written', async () => {
    const { sessions, relay } = adopted(async () => {
      throw new Error('database down');
    });
    relay.abort({ type: 'error', code: 500, error: 'x', message: 'x' } as unknown as ErrorFrame, 4500, 'gone');
    await expect.poll(() => sessions.size).toBe(0);
  });
});

describe('shutdown', () => {
  /** A relay that does not end when told to (a peer or a device that does not answer). */
  class StuckRelay implements LiveRelay {
    bytesIn = 0;
    bytesOut = 0;
    aborted = false;
    readonly done = new Promise<{ bytesIn: number; bytesOut: number; reason: string }>(() => undefined);
    abort(): void {
      this.aborted = true;
    }
  }

  function sessionsWith(recorder: ConsoleRecorder, sessionId: string) {
    const relay = new StuckRelay();
    return { sessions: adoptOne(relay, sessionId, recorder), relay };
  }

  afterEach(() => vi.useRealTimers());

  it('writes what a recording holds when its relay does not end in time, and closes the file', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessions-'));
    const sessionId = '66666666-6666-4666-8666-666666666666';
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const recorder = ConsoleRecorder.open(dir, sessionId, { cols: 80, rows: 24 }, {}, createLogger('silent'));
    let closed = false;
    void recorder.finished.then(() => (closed = true));
    const { sessions, relay } = sessionsWith(recorder, sessionId);
    recorder.output(Buffer.from('before\r\n'));
    const closing = sessions.close();
    expect(relay.aborted).toBe(true);
    // The stuck relay still relays output while shutdown waits for it: the last of it is held in a
    // batch (RECORD_BATCH_MS) when the wait for the relays ends.
    await vi.advanceTimersByTimeAsync(SHUTDOWN_RELAYS_MS - 1);
    recorder.output(Buffer.from('held at shutdown\r\n'));
    await vi.advanceTimersByTimeAsync(1);
    await closing;
    const events = fs
      .readFileSync(recorder.file, 'utf8')
      .trimEnd()
      .split('\n')
      .slice(1)
      .map((line) => JSON.parse(line) as [number, string, string]);
    expect(events.map(([, type, data]) => [type, data])).toEqual([
      ['o', 'before\r\n'],
      ['o', 'held at shutdown\r\n'],
    ]);
    expect(closed).toBe(true);
  });

  it('does not wait without bound for a recording that cannot be written (a stuck disk)', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessions-'));
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const never = new Promise<void>(() => undefined);
    const stuck = { close: () => never, finished: never } as unknown as ConsoleRecorder;
    const { sessions } = sessionsWith(stuck, '77777777-7777-4777-8777-777777777777');
    let closed = false;
    void sessions.close().then(() => (closed = true));
    await vi.advanceTimersByTimeAsync(SHUTDOWN_RELAYS_MS + SHUTDOWN_RECORDINGS_MS);
    expect(closed).toBe(true);
  });
});

describe('the live re-check', () => {
  afterEach(() => vi.useRealTimers());

  /** A live console whose user is authenticated again at every re-check pass: the passes counted. */
  function counted(config: Record<string, unknown>) {
    const principal = new Principal({ id: 'u1', email: 'u@example.com', fname: 'U', lname: 'One' }, 's1', []);
    let passes = 0;
    const sessions = adoptOne(new FakeRelay(), '88888888-8888-4888-8888-888888888888', undefined, undefined, {
      config: { trustProxy: false, dataDir: dir, ...config },
      auth: { authenticate: async () => (passes++, principal) },
      access: { decide: async () => ({ allowed: true }) },
    });
    return { sessions, passes: () => passes };
  }

  it('re-authorizes live sessions every REMOTE_RECHECK_MS: 2 s by default, 250 ms when set so', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessions-'));
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    // the default is the configuration's, the only one
    const byDefault = counted({ remoteRecheckMs: loadConfig({}).remoteRecheckMs });
    const every250 = counted({ remoteRecheckMs: 250 });
    byDefault.sessions.init();
    every250.sessions.init();
    try {
      await vi.advanceTimersByTimeAsync(2000);
      expect(byDefault.passes()).toBe(1);
      expect(every250.passes()).toBe(8);
    } finally {
      await byDefault.sessions.close();
      await every250.sessions.close();
    }
  });
});
