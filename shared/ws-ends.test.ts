import type { AddressInfo } from 'node:net';
import { Duplex, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { quietRepeatedEnds } from './ws-ends.js';

/**
 * Counts the `end()` calls that reach Node's streams on a stream already finished or destroyed: each
 * builds an error (its message and stack) that nobody reads.
 */
function countWastedEnds(): { count: () => number; restore(): void } {
  let wasted = 0;
  const originals = [Writable.prototype.end, Duplex.prototype.end] as const;
  const wrap = (end: (...args: unknown[]) => unknown) =>
    function (this: Writable, ...args: unknown[]) {
      if (this.writableFinished || this.destroyed) wasted += 1;
      return end.apply(this, args);
    };
  Writable.prototype.end = wrap(originals[0] as never) as never;
  Duplex.prototype.end = wrap(originals[1] as never) as never;
  return {
    count: () => wasted,
    restore() {
      Writable.prototype.end = originals[0];
      Duplex.prototype.end = originals[1];
    },
  };
}

let server: WebSocketServer | undefined;
afterEach(async () => {
  const open = server;
  server = undefined;
  if (open) await new Promise((resolve) => open.close(resolve));
});

/** A connection opened and closed by the client (as a session is), both ends quieted or not; the wasted ends it made. */
async function openAndClose(quiet: boolean): Promise<number> {
  server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((resolve) => server?.once('listening', resolve));
  const serverClosed = new Promise<void>((resolve) =>
    server?.once('connection', (ws) => {
      if (quiet) expect(quietRepeatedEnds(ws)).toBe(true);
      ws.once('close', () => resolve());
    }),
  );
  const counter = countWastedEnds();
  try {
    const ws = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    await new Promise((resolve) => ws.once('open', resolve));
    if (quiet) quietRepeatedEnds(ws);
    const clientClosed = new Promise((resolve) => ws.once('close', resolve));
    ws.close();
    // ws emits 'close' from its socket's 'close' (after the socket's 'end'): both ends are done.
    await Promise.all([clientClosed, serverClosed]);
    return counter.count();
  } finally {
    counter.restore();
  }
}

describe('a WebSocket closed by its closing handshake', () => {
  it('ends no finished or destroyed stream again once quieted (ws does, several times a connection)', async () => {
    expect(await openAndClose(false)).toBeGreaterThan(0);
    expect(await openAndClose(true)).toBe(0);
  });

  it('changes nothing on a WebSocket without its socket', () => {
    const ws = new WebSocket('ws://127.0.0.1:1/', { autoPong: true });
    ws.on('error', () => {});
    expect(quietRepeatedEnds(ws)).toBe(false);
    ws.terminate();
  });
});
