import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import type WebSocket from 'ws';
import { ConsoleAcks } from '../../shared/console-acks.js';
import type { Channel } from '../../shared/mux.js';
import { CONSOLE_HISTORY_BYTES, ConsoleRelay, OutputHistory, WATCHER_MAX_UNREAD } from './console-relay.js';
import { ConsoleRecorder, recordingPath } from './recordings.js';
import { CONSOLE_UNACKED_MAX, errorFrame, MAX_INVALID_FRAMES, Relay, SessionClose, SOCKET_HIGH_WATER } from './relay.js';

describe('OutputHistory', () => {
  it('keeps everything until full, in order', () => {
    const h = new OutputHistory(16);
    h.push(Buffer.from('abc'));
    h.push(Buffer.from('defg'));
    expect(h.contents().toString()).toBe('abcdefg');
    expect(h.size).toBe(7);
  });

  it('keeps only the latest bytes once it wraps, starting after a line break', () => {
    const h = new OutputHistory(8);
    h.push(Buffer.from('0123456'));
    h.push(Buffer.from('7\n9AB'));
    // the ring holds "456 7\n9AB" minus the oldest: "4567\n9AB"; the replay starts after the line break
    expect(h.size).toBe(8);
    expect(h.contents().toString()).toBe('9AB');
  });

  it('takes a chunk larger than itself by keeping its tail', () => {
    const h = new OutputHistory(4);
    h.push(Buffer.from('xy'));
    h.push(Buffer.from('abcdefgh'));
    expect(h.contents().toString()).toBe('efgh');
    h.push(Buffer.from('i'));
    expect(h.contents().toString()).toBe('fghi');
  });

  it('holds memory for what was printed, not for its capacity', () => {
    const h = new OutputHistory(CONSOLE_HISTORY_BYTES);
    expect(h.allocated).toBe(0);
    h.push(Buffer.from('$ '));
    expect(h.allocated).toBeLessThanOrEqual(1024);
    for (let i = 0; i < 100; i += 1) h.push(Buffer.alloc(1000, 0x61));
    expect(h.allocated).toBeLessThanOrEqual(2 * 100_002);
    for (let i = 0; i < 1000; i += 1) h.push(Buffer.alloc(1000, 0x62));
    expect(h.allocated).toBe(CONSOLE_HISTORY_BYTES);
  });

  it('keeps the same bytes as a plain tail of the output, however the chunks fall while it grows and wraps', () => {
    let seed = 7;
    const random = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (const capacity of [5, 64, 1000, 5000]) {
      const h = new OutputHistory(capacity);
      let all = '';
      for (let i = 0; i < 300; i += 1) {
        const chunk = 'x'.repeat(random(capacity * 2)) + String(i % 10);
        h.push(Buffer.from(chunk));
        all += chunk;
        const kept = all.slice(-capacity);
        expect(h.size).toBe(kept.length);
        // Before it wraps the contents are everything; after, a tail of it.
        if (all.length <= capacity) expect(h.contents().toString()).toBe(all);
        else expect(kept.endsWith(h.contents().toString())).toBe(true);
      }
    }
  });
});

/** A channel as the relay uses it: data and control from the device, pause/resume as its credit. */
class FakeChannel extends EventEmitter {
  destroyed = false;
  writableEnded = false;
  writableLength = 0;
  errored: Error | null = null;
  paused = false;
  controls: unknown[] = [];
  written: Buffer[] = [];
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  control(msg: unknown): void {
    this.controls.push(msg);
  }
  write(data: Buffer): boolean {
    this.written.push(data);
    return true;
  }
  end(): void {
    this.writableEnded = true;
  }
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    queueMicrotask(() => this.emit('close'));
  }
}

/** A user's socket: what the relay sent, and sends that complete at once unless `stalled`. */
class FakeSocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  bufferedAmount = 0;
  stalled = false;
  sent: (Buffer | string)[] = [];
  closedWith?: number;
  send(data: Buffer | string, _opts?: unknown, cb?: () => void): void {
    this.sent.push(data);
    if (this.stalled) this.bufferedAmount += data.length;
    else cb?.();
  }
  close(code: number): void {
    this.closedWith = code;
    this.readyState = 2;
    queueMicrotask(() => this.emit('close', code));
  }
  terminate(): void {
    this.close(1006);
  }
  ping(): void {}
  pause(): void {}
  resume(): void {}
  bytes(): string {
    return Buffer.concat(this.sent.filter((d): d is Buffer => Buffer.isBuffer(d))).toString();
  }
  frames(): { type: string; [k: string]: unknown }[] {
    return this.sent.filter((d): d is string => typeof d === 'string').map((d) => JSON.parse(d));
  }
}

const who = { id: 'u1', email: 'u@example.com' };

function started(graceMs = 60_000) {
  const channel = new FakeChannel();
  const relay = new ConsoleRelay(channel as unknown as Channel, { sessionId: 's1', graceMs, size: { cols: 80, rows: 24 } });
  const owner = new FakeSocket();
  relay.start(owner as unknown as WebSocket, who);
  return { channel, relay, owner };
}

describe('ConsoleRelay', () => {
  it('holds the shell once a detached console has CONSOLE_HISTORY_BYTES unseen, and lets it go on re-attach', async () => {
    const { channel, relay, owner } = started();
    owner.emit('close', 1006);
    expect(relay.attached).toBe(false);
    expect(channel.destroyed).toBe(false);
    channel.emit('data', Buffer.alloc(CONSOLE_HISTORY_BYTES - 1, 'a'));
    expect(channel.paused).toBe(false);
    channel.emit('data', Buffer.from('b\n'));
    expect(channel.paused).toBe(true); // no more credit: the pty blocks

    const back = new FakeSocket();
    expect(relay.reattach(back as unknown as WebSocket, who, { cols: 100, rows: 30 })).toBe(true);
    expect(back.frames()[0]).toMatchObject({ type: 'ready', session: 's1', reattached: true });
    expect(back.bytes().endsWith('b\n')).toBe(true); // what came while away
    expect(channel.paused).toBe(false);
    expect(channel.controls.at(-1)).toEqual({ type: 'resize', cols: 100, rows: 30 });
  });

  it('sends an echo to its owner before recording it, and a resize to the recording in its place', () => {
    const channel = new FakeChannel();
    const events: string[] = [];
    const owner = new FakeSocket();
    const recorder = {
      output: (chunk: Buffer) => events.push(`o:${chunk.toString()}:${owner.bytes().length}`),
      resize: (cols: number, rows: number) => events.push(`r:${cols}x${rows}`),
    };
    const relay = new ConsoleRelay(channel as unknown as Channel, { sessionId: 's1', graceMs: 0, size: { cols: 80, rows: 24 }, recorder });
    relay.start(owner as unknown as WebSocket, who);
    channel.emit('data', Buffer.from('a'));
    owner.emit('message', Buffer.from(JSON.stringify({ type: 'resize', cols: 90, rows: 30 })), false);
    channel.emit('data', Buffer.from('b'));
    // Each chunk was on the owner's socket when the recording got it.
    expect(events).toEqual(['o:a:1', 'r:90x30', 'o:b:2']);
  });

  it('leaves in the recording what was held when the console was aborted', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'console-relay-'));
    try {
      const sessionId = '55555555-5555-4555-8555-555555555555';
      const recorder = ConsoleRecorder.open(dir, sessionId, { cols: 80, rows: 24 }, {}, { warn: () => {} });
      const channel = new FakeChannel();
      const relay = new ConsoleRelay(channel as unknown as Channel, { sessionId, graceMs: 60_000, size: { cols: 80, rows: 24 }, recorder });
      relay.start(new FakeSocket() as unknown as WebSocket, who);
      channel.emit('data', Buffer.from('last output'));
      relay.abort(errorFrame(503, 'shutting_down', 'bye'), SessionClose.goingAway, 'broker shut down');
      await relay.done;
      await recorder.close(); // as RemoteSessions does once the relay is done
      const events = fs
        .readFileSync(recordingPath(dir, sessionId)!, 'utf8')
        .trim()
        .split('\n')
        .slice(1)
        .map((l) => JSON.parse(l));
      expect(events.map((e) => e[2]).join('')).toBe('last output');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('ends at once on a deliberate close, and at the end of the grace period otherwise', async () => {
    const deliberate = started();
    deliberate.owner.emit('close', 1000);
    expect(deliberate.channel.destroyed).toBe(true);
    expect((await deliberate.relay.done).reason).toBe('closed by the client');

    const dropped = started(20);
    dropped.owner.emit('close', 1006);
    expect(dropped.channel.destroyed).toBe(false);
    expect((await dropped.relay.done).reason).toBe('detached: not re-attached within 0.02 s');
  });

  it("never forwards a watcher's keys or resizes, and cuts a watcher that does not read", () => {
    const { channel, relay, owner } = started();
    const watcher = new FakeSocket();
    relay.watch(watcher as unknown as WebSocket, { id: 'u2', email: 'w@example.com' });
    expect(owner.frames().at(-1)).toEqual({ type: 'watchers', watchers: [{ id: 'u2', email: 'w@example.com' }] });
    watcher.emit('message', Buffer.from('rm -rf /\n'), true);
    watcher.emit('message', Buffer.from(JSON.stringify({ type: 'resize', cols: 5, rows: 5 })), false);
    expect(channel.written).toEqual([]);
    expect(channel.controls).toEqual([{ type: 'resize', cols: 80, rows: 24 }]);

    watcher.stalled = true;
    const chunk = Buffer.alloc(64 * 1024, 'x');
    for (let i = 0; i * chunk.length <= WATCHER_MAX_UNREAD + chunk.length; i += 1) {
      channel.emit('data', chunk);
      // The owner acknowledges: its console goes on whatever the watcher does.
      owner.emit('message', Buffer.from(JSON.stringify({ type: 'ack', bytes: chunk.length })), false);
    }
    expect(watcher.closedWith).toBe(1006);
    expect(relay.watching).toEqual([]);
    expect(owner.frames().at(-1)).toEqual({ type: 'watchers', watchers: [] });
    expect(channel.paused).toBe(false);
  });

  it('never pauses an owner acknowledging per CONSOLE_ACK_EVERY, and holds one that stops acknowledging at CONSOLE_UNACKED_MAX', () => {
    const { channel, owner } = started();
    // The client's rule (shared/console-acks.ts): one ack per 64 KiB shown, none for the echoes in between.
    const acks = new ConsoleAcks((bytes) => owner.emit('message', Buffer.from(JSON.stringify({ type: 'ack', bytes })), false));
    for (let i = 0; i < 10_000; i += 1) {
      channel.emit('data', Buffer.from('a'));
      acks.shown(1);
      expect(channel.paused).toBe(false);
    }
    const screen = Buffer.alloc(4096, 'x');
    for (let i = 0; i < (8 * CONSOLE_UNACKED_MAX) / screen.length; i += 1) {
      channel.emit('data', screen);
      acks.shown(screen.length);
      expect(channel.paused).toBe(false);
    }
    // The client stops showing output (and so acknowledging it): the console is held within the bound.
    let held = 0;
    while (!channel.paused) {
      channel.emit('data', screen);
      held += screen.length;
      expect(held).toBeLessThanOrEqual(CONSOLE_UNACKED_MAX);
    }
    acks.shown(held);
    expect(channel.paused).toBe(false);
  });

  it('holds an owner that acknowledges output it never read (acks ahead, socket not reading) at the socket bound', () => {
    const { channel, owner } = started();
    owner.stalled = true;
    const ack = (bytes: number) => owner.emit('message', Buffer.from(JSON.stringify({ type: 'ack', bytes })), false);
    ack(Number.MAX_SAFE_INTEGER); // far more than was ever sent: the count stays at 0, never below
    const screen = Buffer.alloc(4096, 'x');
    let held = 0;
    while (!channel.paused) {
      channel.emit('data', screen);
      held += screen.length;
      ack(screen.length * 4);
      expect(held).toBeLessThanOrEqual(SOCKET_HIGH_WATER + screen.length);
    }
    expect(owner.bufferedAmount).toBe(held);
    expect(held).toBeLessThan(CONSOLE_UNACKED_MAX);
    // Still held after more forged acks: it is the unsent bytes that hold it.
    ack(Number.MAX_SAFE_INTEGER);
    expect(channel.paused).toBe(true);
  });

  it('parses nothing more from an owner it has closed for invalid frames (the rest of its flood is dropped unread)', () => {
    const { channel, owner, relay } = started();
    const parse = vi.spyOn(JSON, 'parse');
    try {
      // One socket read can hold thousands of small frames, all handed on after the console is aborted.
      for (let i = 0; i < 5000; i += 1) owner.emit('message', Buffer.from('not json'), false);
      expect(owner.closedWith).toBeDefined();
      expect(relay.ending).toBe(true);
      expect(channel.destroyed).toBe(true);
      expect(parse.mock.calls.length).toBe(MAX_INVALID_FRAMES + 1);
    } finally {
      parse.mockRestore();
    }
  });

  it('parses nothing more from a watcher it has cut for invalid frames, and tells the others once', () => {
    const { channel, owner, relay } = started();
    const watcher = new FakeSocket();
    relay.watch(watcher as unknown as WebSocket, { id: 'u2', email: 'w@example.com' });
    const watcherLists = () => owner.frames().filter((f) => f.type === 'watchers').length;
    const before = watcherLists();
    const parse = vi.spyOn(JSON, 'parse');
    try {
      for (let i = 0; i < 5000; i += 1) watcher.emit('message', Buffer.from('not json'), false);
      expect(parse.mock.calls.length).toBe(MAX_INVALID_FRAMES + 1);
    } finally {
      parse.mockRestore();
    }
    expect(relay.watching).toEqual([]);
    expect(watcherLists()).toBe(before + 1);
    expect(watcher.frames().filter((f) => f.error === 'too_many_invalid_frames')).toHaveLength(1);
    expect(channel.destroyed).toBe(false);
  });

  it('cuts a watcher sending invalid frames, and the console runs on', () => {
    const { channel, relay } = started();
    const watcher = new FakeSocket();
    relay.watch(watcher as unknown as WebSocket, { id: 'u2', email: 'w@example.com' });
    for (let i = 0; i <= MAX_INVALID_FRAMES; i += 1) watcher.emit('message', Buffer.from('{"type":"resize","cols":0}'), false);
    expect(
      watcher
        .frames()
        .filter((f) => f.type === 'error')
        .at(-1),
    ).toMatchObject({ error: 'too_many_invalid_frames' });
    expect(watcher.closedWith).toBeDefined();
    expect(relay.watching).toEqual([]);
    expect(channel.destroyed).toBe(false);
    expect(relay.ending).toBe(false);
  });
});

describe('Relay', () => {
  it("sends a console's output to the user before recording it, even when the socket cannot take it", () => {
    const channel = new FakeChannel();
    const ws = new FakeSocket();
    const events: string[] = [];
    const recorder = { output: (chunk: Buffer) => events.push(`o:${chunk.toString()}:${ws.bytes().length}`), resize: () => {} };
    const relay = new Relay(ws as unknown as WebSocket, channel as unknown as Channel, { kind: 'console', info: {}, size: { cols: 80, rows: 24 }, recorder });
    relay.start();
    channel.emit('data', Buffer.from('a'));
    channel.emit('data', Buffer.from('b'));
    expect(events).toEqual(['o:a:1', 'o:b:2']);
    ws.readyState = 2; // closing: nothing more is sent, all is still recorded
    channel.emit('data', Buffer.from('c'));
    expect(events).toEqual(['o:a:1', 'o:b:2', 'o:c:2']);
  });

  it('parses nothing more from a client it has closed for invalid frames (the rest of its flood is dropped unread)', () => {
    const channel = new FakeChannel();
    const ws = new FakeSocket();
    const relay = new Relay(ws as unknown as WebSocket, channel as unknown as Channel, { kind: 'console', info: {}, size: { cols: 80, rows: 24 } });
    relay.start();
    const parse = vi.spyOn(JSON, 'parse');
    try {
      // One socket read can hold thousands of small frames, all handed on after the session is closed.
      for (let i = 0; i < 5000; i += 1) ws.emit('message', Buffer.from('not json'), false);
      expect(ws.closedWith).toBe(SessionClose.badRequest);
      expect(parse.mock.calls.length).toBe(MAX_INVALID_FRAMES + 1);
    } finally {
      parse.mockRestore();
    }
  });
});
