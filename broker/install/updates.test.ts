/**
 * The broker's agent publication: what it announces, and `agent_update_request` from a hostile
 * peer (malformed id or version, another version than published, nothing published, a second
 * download at once).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ChannelKind, ChannelParams, ControlMessage } from '../../shared/protocol.js';
import { AgentUpdates } from './updates.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function setup(publish = true, onNewRelease?: (r: { version: string; sha256: string }) => void) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-updates-'));
  dirs.push(dir);
  const bundle = Buffer.from('#!/usr/bin/env node\nconsole.log(1);\n');
  if (publish) {
    fs.writeFileSync(path.join(dir, 'fleet-agent.mjs'), bundle);
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ version: '1.2.3' }));
  }
  const sent: { deviceId: string; msg: ControlMessage }[] = [];
  const opened: { kind: ChannelKind; params: ChannelParams; received: Buffer[] }[] = [];
  let hold: Promise<void> | undefined;
  const updates = new AgentUpdates({
    dir,
    logger: pino({ level: 'silent' }),
    ...(onNewRelease ? { onNewRelease } : {}),
    agents: {
      send: (deviceId, msg) => {
        sent.push({ deviceId, msg });
        return true;
      },
      connectedDevices: () => ['dev-a', 'dev-b'],
      open: async (_deviceId, kind, params) => {
        if (hold) await hold;
        const { PassThrough } = await import('node:stream');
        const channel = new PassThrough();
        const entry = { kind, params, received: [] as Buffer[] };
        channel.on('data', (c: Buffer) => entry.received.push(c));
        opened.push(entry);
        return { channel: channel as never };
      },
    },
  });
  return { dir, bundle, updates, sent, opened, holdOpen: (p: Promise<void>) => (hold = p) };
}

let bumps = 0;
/** A new package.json (of a new size: the build is seen as new whatever the clock's resolution). */
const republish = (dir: string, version: string) => fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ version, pad: 'x'.repeat(++bumps) }));

const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

describe('agent publication', () => {
  it('announces the published version with its sha256 and size, and nothing when none is built', async () => {
    const s = setup();
    await s.updates.onConnected('dev-a');
    expect(s.sent).toEqual([{ deviceId: 'dev-a', msg: { t: 'agent_update', version: '1.2.3', sha256: sha(s.bundle), size: s.bundle.length } }]);
    const none = setup(false);
    await none.updates.onConnected('dev-a');
    expect(none.sent).toEqual([]);
  });

  it('announces a new build to every connected agent once', async () => {
    const s = setup();
    await s.updates.checkPublished();
    expect(s.sent).toEqual([]);
    fs.writeFileSync(path.join(s.dir, 'package.json'), JSON.stringify({ version: '1.2.4', extra: true }));
    await s.updates.checkPublished();
    await s.updates.checkPublished();
    expect(s.sent.map((x) => [x.deviceId, (x.msg as { version: string }).version])).toEqual([
      ['dev-a', '1.2.4'],
      ['dev-b', '1.2.4'],
    ]);
  });

  it('looks at the directory once for many agents connecting at once (a reconnect storm), not twice per agent', async () => {
    const s = setup();
    const stat = vi.spyOn(fs.promises, 'stat');
    try {
      const devices = Array.from({ length: 50 }, (_, i) => `dev-${i}`);
      await Promise.all(devices.map((d) => s.updates.onConnected(d)));
      expect(stat.mock.calls.length).toBeLessThanOrEqual(2);
    } finally {
      stat.mockRestore();
    }
    expect(s.sent).toHaveLength(50);
    expect(new Set(s.sent.map((x) => (x.msg as { version: string }).version))).toEqual(new Set(['1.2.3']));
  });

  it('leaves no agent on an older build: one connecting just after a new build hears of it at the next poll at the latest', async () => {
    const s = setup();
    await s.updates.checkPublished(); // at start
    await s.updates.onConnected('dev-a');
    republish(s.dir, '1.2.4');
    // Within the shared look: told what that look found (the older build, or the new one).
    await s.updates.onConnected('dev-b');
    await s.updates.checkPublished(); // the poll
    const last = new Map(s.sent.map((x) => [x.deviceId, (x.msg as { version: string }).version]));
    expect(last).toEqual(
      new Map([
        ['dev-a', '1.2.4'],
        ['dev-b', '1.2.4'],
      ]),
    );
    // A look after the new build is never answered from the older one.
    await s.updates.onConnected('dev-c');
    expect(s.sent.at(-1)).toMatchObject({ deviceId: 'dev-c', msg: { version: '1.2.4' } });
  });

  it('tells the other brokers of a build it found, not of one another broker told it of', async () => {
    const told: string[] = [];
    const s = setup(true, (r) => told.push(r.version));
    await s.updates.checkPublished();
    republish(s.dir, '1.2.4');
    await s.updates.checkPublished();
    expect(told).toEqual(['1.2.4']);
    // Another broker found 1.2.5 in the shared directory: announced here at once, not told back.
    republish(s.dir, '1.2.5');
    await s.updates.checkPublished({ from: 'b', version: '1.2.5', sha256: sha(s.bundle) });
    expect(told).toEqual(['1.2.4']);
    expect(s.sent.map((x) => (x.msg as { version: string }).version)).toEqual(['1.2.4', '1.2.4', '1.2.5', '1.2.5']);
  });

  it('announces nothing of another broker’s build its own directory does not hold, and a build once', async () => {
    const s = setup();
    await s.updates.checkPublished();
    await s.updates.checkPublished({ from: 'b', version: '9.9.9', sha256: 'f'.repeat(64) });
    expect(s.sent).toEqual([]);
    republish(s.dir, '1.3.0');
    // Two checks at once (a poll and another broker's event): the build is announced once.
    await Promise.all([s.updates.checkPublished(), s.updates.checkPublished({ from: 'b', version: '1.3.0', sha256: sha(s.bundle) })]);
    expect(s.sent.map((x) => [x.deviceId, (x.msg as { version: string }).version])).toEqual([
      ['dev-a', '1.3.0'],
      ['dev-b', '1.3.0'],
    ]);
  });

  it('sends the published bundle on a file channel', async () => {
    const s = setup();
    await s.updates.onRequest('dev-a', { t: 'agent_update_request', id: 'abc123', version: '1.2.3' });
    expect(s.opened).toHaveLength(1);
    expect(s.opened[0]?.kind).toBe('file');
    expect(s.opened[0]?.params).toEqual({ id: 'abc123', path: '/agent/fleet-agent-1.2.3.mjs', size: s.bundle.length, sha256: sha(s.bundle) });
    expect(Buffer.concat(s.opened[0]?.received ?? [])).toEqual(s.bundle);
  });

  it('refuses hostile requests without opening anything', async () => {
    const s = setup();
    await s.updates.onRequest('dev-a', { id: 'x'.repeat(65), version: '1.2.3' });
    await s.updates.onRequest('dev-a', { id: 42, version: '1.2.3' });
    expect(s.sent).toEqual([]); // no id to answer to: dropped
    await s.updates.onRequest('dev-a', { id: 'a1', version: '../../etc/passwd' });
    await s.updates.onRequest('dev-a', { id: 'a2', version: '1.0.0' });
    await s.updates.onRequest('dev-a', { id: 'a3' });
    expect(s.sent.map((x) => x.msg)).toEqual([
      { t: 'file_refused', id: 'a1', error: 'invalid version' },
      { t: 'file_refused', id: 'a2', error: 'version 1.0.0 is not published here (this broker publishes 1.2.3)' },
      { t: 'file_refused', id: 'a3', error: 'invalid version' },
    ]);
    const none = setup(false);
    await none.updates.onRequest('dev-a', { id: 'b1', version: '1.2.3' });
    expect(none.sent.map((x) => x.msg)).toEqual([{ t: 'file_refused', id: 'b1', error: 'no agent is published on this broker' }]);
    expect(s.opened).toEqual([]);
    expect(none.opened).toEqual([]);
  });

  it('serves one download per device at a time', async () => {
    const s = setup();
    let release!: () => void;
    s.holdOpen(new Promise<void>((r) => (release = r)));
    const first = s.updates.onRequest('dev-a', { id: 'c1', version: '1.2.3' });
    await new Promise((r) => setTimeout(r, 10));
    await s.updates.onRequest('dev-a', { id: 'c2', version: '1.2.3' });
    expect(s.sent.map((x) => x.msg)).toEqual([{ t: 'file_refused', id: 'c2', error: 'busy: too many agent downloads; ask again later' }]);
    release();
    await first;
    expect(s.opened).toHaveLength(1);
  });
});
