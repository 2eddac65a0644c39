import crypto from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { FrameTap, tapBinaryFrames } from './ws-tap.js';

/** One frame's bytes: FIN/RSV/opcode byte, length, optional key (the payload masked with it). */
function frame(opcode: number, payload: Buffer, o: { fin?: boolean; rsv?: number; mask?: boolean } = {}): Buffer {
  const len = payload.length;
  const ext = len < 126 ? 0 : len < 65536 ? 2 : 8;
  const head = Buffer.alloc(2 + ext + (o.mask ? 4 : 0));
  head[0] = (o.fin === false ? 0 : 0x80) | (o.rsv ?? 0) | opcode;
  head[1] = (o.mask ? 0x80 : 0) | (ext === 0 ? len : ext === 2 ? 126 : 127);
  if (ext === 2) head.writeUInt16BE(len, 2);
  if (ext === 8) head.writeBigUInt64BE(BigInt(len), 2);
  let body = payload;
  if (o.mask) {
    const key = crypto.randomBytes(4);
    key.copy(head, 2 + ext);
    body = Buffer.alloc(len);
    for (let i = 0; i < len; i++) body[i] = payload[i] ^ key[i & 3];
  }
  return Buffer.concat([head, body]);
}

/** Feeds `stream` to a tap in pieces cut at `cuts`; answers the payloads taken (re-joined) and the bytes handed to ws. */
function run(stream: Buffer, cuts: number[], isServer: boolean, maxPayload = 0) {
  const taken: Buffer[][] = [];
  const toWs: Buffer[] = [];
  const tap = new FrameTap(
    isServer,
    maxPayload,
    (piece, at, length) => {
      if (at === 0) taken.push([]);
      if (at + piece.length > length) throw new Error(`piece beyond its frame: ${at} + ${piece.length} > ${length}`);
      // A copy: the test checks what the piece held when it was handed over.
      taken[taken.length - 1].push(Buffer.from(piece));
    },
    (chunk) => (toWs.push(Buffer.from(chunk)), true),
    () => true,
  );
  let from = 0;
  for (const cut of [...cuts, stream.length]) {
    tap.write(stream.subarray(from, cut));
    from = cut;
  }
  return { taken: taken.map((pieces) => Buffer.concat(pieces)), toWs: Buffer.concat(toWs) };
}

function randomCuts(length: number, count: number): number[] {
  const cuts = new Set<number>();
  while (cuts.size < count) cuts.add(1 + crypto.randomInt(length - 1));
  return [...cuts].sort((a, b) => a - b);
}

describe('ws tap', () => {
  for (const isServer of [false, true]) {
    it(`takes only final unfragmented binary frames ${isServer ? 'masked (from a client)' : 'unmasked (from a server)'}, however the reads cut them`, () => {
      const m = isServer;
      const data = [crypto.randomBytes(0), crypto.randomBytes(5), crypto.randomBytes(300), crypto.randomBytes(70_000), crypto.randomBytes(131_076)];
      const passed = [
        frame(1, Buffer.from('{"t":"credit"}'), { mask: m }),
        frame(9, Buffer.from('ping'), { mask: m }),
        // a fragmented binary message: ws re-assembles it, and a final binary frame inside it is ws's to refuse
        Buffer.concat([frame(2, Buffer.from('frag-'), { fin: false, mask: m }), frame(0, Buffer.from('ment'), { mask: m })]),
        frame(2, Buffer.from('compressed'), { rsv: 0x40, mask: m }),
        frame(2, Buffer.from('wrong mask'), { mask: !m }),
      ];
      const taken = data.map((d) => frame(2, d, { mask: m }));
      // taken and passed frames interleaved: t0 p0 t1 p1 …
      const order: Buffer[] = [];
      for (let i = 0; i < taken.length; i++) order.push(taken[i], ...(passed[i] ? [passed[i]] : []));
      const stream = Buffer.concat(order);
      for (const cuts of [[], randomCuts(stream.length, 40), Array.from({ length: 400 }, (_, i) => i + 1)]) {
        // A copy each time: masked payloads are unmasked where they lie, as ws does.
        const got = run(Buffer.from(stream), cuts, isServer);
        expect(got.taken.map((b) => b.toString('base64'))).toEqual(data.map((b) => b.toString('base64')));
        expect(got.toWs.equals(Buffer.concat(passed))).toBe(true);
      }
    });
  }

  it('hands ws every frame above maxPayload, and everything from a close frame on', () => {
    const big = frame(2, crypto.randomBytes(2000));
    const small = frame(2, crypto.randomBytes(10));
    const close = frame(8, Buffer.from([0x03, 0xe8]));
    const after = frame(2, crypto.randomBytes(10));
    const got = run(Buffer.concat([small, big, close, after]), randomCuts(small.length + big.length + close.length + after.length, 10), false, 1000);
    expect(got.taken).toEqual([small.subarray(2)]);
    expect(got.toWs.equals(Buffer.concat([big, close, after]))).toBe(true);
  });

  it('hands ws a 64-bit length it cannot read, and all that follows', () => {
    const bad = Buffer.from([0x82, 0x7f, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 2, 3]);
    const got = run(Buffer.concat([bad, frame(2, Buffer.from('later'))]), [3], false);
    expect(got.taken).toEqual([]);
    expect(got.toWs.length).toBe(bad.length + 7);
  });

  it('waits for ws to be between frames before taking any', () => {
    let boundary = false;
    const toWs: Buffer[] = [];
    const pieces: Buffer[] = [];
    const tap = new FrameTap(
      false,
      0,
      (p) => pieces.push(Buffer.from(p)),
      (c) => (toWs.push(Buffer.from(c)), true),
      () => boundary,
    );
    tap.write(frame(2, Buffer.from('ws holds part of a frame')));
    boundary = true;
    tap.write(frame(2, Buffer.from('taken')));
    expect(Buffer.concat(toWs).toString()).toContain('ws holds part');
    expect(Buffer.concat(pieces).toString()).toBe('taken');
  });
});

describe('ws tap on a real WebSocket', () => {
  let close: (() => void) | undefined;
  afterEach(() => close?.());

  async function pair(maxPayload?: number) {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
    await new Promise((r) => wss.once('listening', r));
    const serverSide = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
    const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false, ...(maxPayload ? { maxPayload } : {}) });
    await new Promise((r) => client.once('open', r));
    const server = await serverSide;
    close = () => {
      client.terminate();
      wss.close();
    };
    return { server, client };
  }

  it('delivers binary frames in pieces and text, pings and fragmented messages through ws, in order', async () => {
    const { server, client } = await pair();
    const events: string[] = [];
    let current: Buffer[] = [];
    expect(
      tapBinaryFrames(client, (piece, at, length) => {
        current.push(Buffer.from(piece));
        if (at + piece.length === length) {
          events.push(`bin:${crypto.createHash('sha256').update(Buffer.concat(current)).digest('hex').slice(0, 8)}`);
          current = [];
        }
      }),
    ).toBe(true);
    client.on('message', (d, isBinary) => events.push(isBinary ? `msg:${String(d)}` : `text:${String(d)}`));
    client.on('ping', () => events.push('ping'));
    const big = crypto.randomBytes(1024 * 1024 + 3);
    server.send(big);
    server.send('hello');
    server.ping();
    server.send(Buffer.from('frag'), { fin: false, binary: true });
    server.send(Buffer.from('ment'), { fin: true, binary: true });
    server.send(Buffer.from('x'));
    const done = new Promise<number>((r) => client.once('close', r));
    server.close(1000);
    expect(await done).toBe(1000);
    const sha = (b: Buffer) => `bin:${crypto.createHash('sha256').update(b).digest('hex').slice(0, 8)}`;
    expect(events).toEqual([sha(big), 'text:hello', 'ping', 'msg:fragment', sha(Buffer.from('x'))]);
  });

  it('leaves an oversized frame to ws, which refuses it as before (1009)', async () => {
    const { server, client } = await pair(1024);
    let pieces = 0;
    const refused = new Promise<Error>((r) => client.once('error', r));
    tapBinaryFrames(client, () => (pieces += 1));
    const closed = new Promise<number>((r) => server.once('close', r));
    server.send(crypto.randomBytes(4096));
    expect(await closed).toBe(1009);
    expect((await refused).message).toMatch(/max payload/i);
    expect(pieces).toBe(0);
  });
});
