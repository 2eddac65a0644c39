import http from 'node:http';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { AcceptRate, limitAcceptRate } from './connection-limits.js';

/** A clock the test moves by hand (milliseconds). */
function clock() {
  let t = 0;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('AcceptRate', () => {
  it('admits a burst up to the bucket, then refuses the rest at once', () => {
    const c = clock();
    const rate = new AcceptRate(10, 40, 100, c.now);
    const answers = Array.from({ length: 100 }, () => rate.admit('10.0.0.1'));
    expect(answers.filter(Boolean)).toHaveLength(40);
    expect(answers.slice(40).every((a) => !a)).toBe(true);
  });

  it('never refuses a steady client under the rate, even after a refused burst', () => {
    const c = clock();
    const rate = new AcceptRate(10, 40, 100, c.now);
    for (let i = 0; i < 200; i++) rate.admit('10.0.0.1');
    // 10 a second is the rate: one every 100 ms (and a little slower) always gets in.
    c.advance(100);
    for (let i = 0; i < 300; i++) {
      expect(rate.admit('10.0.0.1')).toBe(true);
      c.advance(101);
    }
  });

  it('counts each address on its own: a flooding one does not refuse another', () => {
    const c = clock();
    const rate = new AcceptRate(10, 40, 100, c.now);
    for (let i = 0; i < 1000; i++) rate.admit('10.0.0.1');
    expect(rate.admit('10.0.0.1')).toBe(false);
    expect(Array.from({ length: 40 }, () => rate.admit('10.0.0.2')).every(Boolean)).toBe(true);
  });

  it('refills the bucket over time, no further than its size', () => {
    const c = clock();
    const rate = new AcceptRate(10, 40, 100, c.now);
    for (let i = 0; i < 40; i++) rate.admit('10.0.0.1');
    expect(rate.admit('10.0.0.1')).toBe(false);
    c.advance(3_600_000);
    expect(Array.from({ length: 50 }, () => rate.admit('10.0.0.1')).filter(Boolean)).toHaveLength(40);
  });

  it('remembers at most maxAddresses, forgetting the one seen least recently', () => {
    const c = clock();
    const rate = new AcceptRate(10, 40, 100, c.now);
    for (let i = 0; i < 40; i++) rate.admit('flooder');
    for (let i = 0; i < 10_000; i++) {
      rate.admit(`10.1.${i >> 8}.${i & 255}`);
      // The flooder keeps trying: it stays among the recent ones and its bucket stays empty.
      if (i % 50 === 0) expect(rate.admit('flooder')).toBe(false);
      expect(rate.size).toBeLessThanOrEqual(100);
    }
    expect(rate.size).toBe(100);
  });
});

describe('limitAcceptRate on a server', () => {
  let server: http.Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
  });

  it('closes connections over the rate before any listener sees them; another address still gets in', async () => {
    let seen = 0;
    server = http.createServer((_req, res) => res.end('ok'));
    server.on('connection', () => (seen += 1));
    const rate = limitAcceptRate(server, 2); // a bucket of 8
    expect(rate?.burst).toBe(8);
    await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
    const port = (server.address() as net.AddressInfo).port;
    const dial = (localAddress: string) =>
      new Promise<boolean>((resolve) => {
        const socket = net.connect({ port, host: '127.0.0.1', localAddress });
        socket.on('error', () => resolve(false));
        socket.once('connect', () => socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
        let body = '';
        socket.on('data', (d) => (body += d));
        socket.once('close', () => resolve(body.includes('200 OK')));
      });
    const answered = await Promise.all(Array.from({ length: 30 }, () => dial('127.0.0.1')));
    expect(answered.filter(Boolean).length).toBeLessThanOrEqual(20); // the bucket of 8, and what refilled meanwhile (2 a second)
    expect(answered.filter((a) => !a).length).toBeGreaterThan(0);
    expect(seen).toBe(answered.filter(Boolean).length);
    expect(await dial('127.0.0.2')).toBe(true);
  });

  it('is off at 0', () => {
    server = http.createServer();
    expect(limitAcceptRate(server, 0)).toBeUndefined();
  });
});
