import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import { createLogger } from '../logger.js';
import { ConsoleRecorder } from './recordings.js';
import type { ErrorFrame } from './relay.js';
import { RemoteSessions, type LiveRelay, type RemoteSessionsDeps } from './sessions.js';

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

describe('a live console with a required recording', () => {
  it('is ended when its recording cannot keep up, rather than run unrecorded', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessions-'));
    const ends: string[] = [];
    const deps = {
      config: { trustProxy: false, dataDir: dir },
      logger: createLogger('silent'),
      auth: { authenticate: async () => principal },
      access: {},
      audit: { recordRemoteStart: async () => 1, recordRemoteEnd: async (_id: number, end: { reason: string }) => void ends.push(end.reason) },
      locator: {} as AgentLocator,
    } as unknown as RemoteSessionsDeps;
    const principal = new Principal({ id: 'u1', email: 'u@example.com', fname: 'U', lname: 'One' }, 's1', []);
    const sessions = new RemoteSessions(deps);
    const sessionId = '44444444-4444-4444-8444-444444444444';
    const recorder = ConsoleRecorder.open(dir, sessionId, { cols: 80, rows: 24 }, {}, createLogger('silent'), true);
    const relay = new FakeRelay();
    sessions.adopt(
      {
        ok: true,
        caller: { principal, token: 't', source: 'api', ip: '127.0.0.1' },
        deviceId: 'd'.repeat(64),
        request: { action: 'console' },
        channel: {} as Channel,
        relayOptions: { kind: 'console', info: {}, recorder },
        auditId: 1,
        startedAt: Date.now(),
        sessionId,
        recorder,
      },
      relay,
    );
    expect(sessions.list().map((s) => s.id)).toEqual([sessionId]);
    // A flood faster than the disk: more than the write-behind cap at once.
    const chunk = Buffer.alloc(64 * 1024, 'y');
    for (let i = 0; i < 64; i += 1) recorder.output(chunk);
    expect(relay.aborted).toMatchObject({ frame: { error: 'recording_failed' }, reason: 'required recording could not be written' });
    await expect.poll(() => ends).toEqual(['required recording could not be written']);
    expect(sessions.size).toBe(0);
  });
});
