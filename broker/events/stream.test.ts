import { EventEmitter } from 'node:events';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Principal } from '../access/principal.js';
import { DeviceEventStream, MAX_LISTENERS_PER_USER, type EventSink, type Listener } from './stream.js';

/** A principal that may read the listed devices only. */
function principal(userId: string, readable: string[]): Principal {
  return { user: { id: userId }, readable } as unknown as Principal;
}

const access = {
  decide: async (p: Principal, _permission: string, deviceId?: string) =>
    (p as unknown as { readable: string[] }).readable.includes(deviceId ?? '')
      ? { allowed: true as const, code: 'allowed' as const, reason: '' }
      : { allowed: false as const, code: 'outside_resources' as const, reason: 'not readable' },
};

/** A sink that never hands anything to its reader when `stalled`. */
function sink(stalled = false): EventSink & { text: string; closed: boolean } {
  const s = {
    text: '',
    closed: false,
    write(chunk: string) {
      s.text += chunk;
    },
    buffered: () => (stalled ? s.text.length : 0),
    close() {
      s.closed = true;
    },
  };
  return s;
}

function setup(maxBuffered?: number) {
  const hub = new EventEmitter<{ connected: [string]; disconnected: [string] }>();
  const stream = new DeviceEventStream({ hub, access, logger: pino({ level: 'silent' }) }, maxBuffered);
  stream.init();
  return { hub, stream };
}

function listener(p: Principal, s: EventSink, recheck: () => Promise<Principal> = async () => p): Listener {
  return { principal: p, sink: s, recheck };
}

describe('device event stream', () => {
  it('sends each listener only the devices it may read, in order', async () => {
    const { stream } = setup();
    const all = sink();
    const some = sink();
    stream.add(listener(principal('u1', ['a', 'b']), all));
    stream.add(listener(principal('u2', ['a']), some));
    void stream.publish({ event: 'device.online', device_id: 'b', at: 't1' });
    void stream.publish({ event: 'device.online', device_id: 'a', at: 't2' });
    await stream.publish({ event: 'device.offline', device_id: 'a', at: 't3' });
    expect(all.text).toBe(
      'event: device.online\ndata: {"event":"device.online","device_id":"b","at":"t1"}\n\n' +
        'event: device.online\ndata: {"event":"device.online","device_id":"a","at":"t2"}\n\n' +
        'event: device.offline\ndata: {"event":"device.offline","device_id":"a","at":"t3"}\n\n',
    );
    expect(some.text).not.toContain('"b"');
    expect(some.text.match(/^event: /gm)).toHaveLength(2);
    stream.close();
  });

  it('turns hub connects and disconnects into events', async () => {
    const { hub, stream } = setup();
    const s = sink();
    stream.add(listener(principal('u1', ['d1']), s));
    hub.emit('connected', 'd1');
    hub.emit('disconnected', 'd1');
    await stream.publish({ event: 'device.online', device_id: 'other', at: 'x' });
    expect([...s.text.matchAll(/^event: (.*)$/gm)].map((m) => m[1])).toEqual(['device.online', 'device.offline']);
    stream.close();
  });

  it('drops a listener that does not read once its buffer passes the bound, and writes it nothing more', async () => {
    const { stream } = setup(1000);
    const slow = sink(true);
    const fast = sink();
    stream.add(listener(principal('u1', ['d']), slow));
    stream.add(listener(principal('u2', ['d']), fast));
    for (let i = 0; i < 100; i++) void stream.publish({ event: 'device.online', device_id: 'd', at: String(i) });
    await stream.publish({ event: 'device.offline', device_id: 'd', at: 'end' });
    expect(slow.closed).toBe(true);
    // One event past the bound at most: memory held for a stalled reader is bounded.
    expect(slow.text.length).toBeLessThan(1000 + 200);
    expect(stream.size).toBe(1);
    expect(fast.text.match(/^event: /gm)).toHaveLength(101);
    stream.close();
  });

  it('ends the stream of a session that has ended, at the next keepalive', async () => {
    const { stream } = setup();
    const s = sink();
    stream.add(
      listener(principal('u1', ['d']), s, async () => {
        throw new Error('revoked');
      }),
    );
    await stream.ping();
    expect(s.closed).toBe(true);
    expect(stream.size).toBe(0);
    stream.close();
  });

  it('bounds the streams one user may hold', () => {
    const { stream } = setup();
    const p = principal('u1', []);
    for (let i = 0; i < MAX_LISTENERS_PER_USER; i++) expect(stream.add(listener(p, sink()))).toBe(true);
    expect(stream.add(listener(p, sink()))).toBe(false);
    expect(stream.add(listener(principal('u2', []), sink()))).toBe(true);
    stream.close();
  });
});
