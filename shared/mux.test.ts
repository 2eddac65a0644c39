import crypto from 'node:crypto';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { muxPair } from '../test/support/mux-pair.js';
import { MAX_PROTOCOL_ERRORS, Mux, type Channel, type MuxProtocolError } from './mux.js';
import { AgentClose, encodeData, MAX_CHANNEL_CREDIT, MuxErrorCode } from './protocol.js';

const pair = muxPair;

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

describe('mux channels', () => {
  it('carries bytes both ways with the checksum intact and passes the open info', async () => {
    const p = await pair(async (ch) => {
      ch.pipe(ch); // echo
      return { hello: 'agent' };
    });
    cleanup = p.close;
    const { channel, info } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    expect(info).toEqual({ hello: 'agent' });
    const payload = crypto.randomBytes(3 * 1024 * 1024 + 17);
    const received: Buffer[] = [];
    channel.on('data', (d: Buffer) => received.push(d));
    const ended = new Promise((r) => channel.once('end', r));
    channel.end(payload);
    await ended;
    const back = Buffer.concat(received);
    expect(back.length).toBe(payload.length);
    expect(crypto.createHash('sha256').update(back).digest('hex')).toBe(crypto.createHash('sha256').update(payload).digest('hex'));
  });

  it('keeps a slow reader from being flooded: the sender waits for credit', async () => {
    let agentChannel: Channel | undefined;
    const p = await pair(async (ch) => {
      agentChannel = ch;
      ch.pause(); // a reader that reads nothing
    }, 64 * 1024);
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    let written = 0;
    const chunk = Buffer.alloc(16 * 1024, 1);
    // Write until the stream pushes back, then give it time: nothing more than the window may arrive.
    for (let i = 0; i < 200; i++) {
      written += chunk.length;
      if (!channel.write(chunk)) break;
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(written).toBeGreaterThan(64 * 1024);
    expect(agentChannel!.stats.bytesIn).toBeLessThanOrEqual(64 * 1024);
    expect(agentChannel!.readableLength).toBeLessThanOrEqual(64 * 1024);
    // Once the reader consumes, everything arrives.
    const sink = new Writable({ write: (_c, _e, cb) => cb() });
    agentChannel!.pipe(sink);
    channel.end();
    await new Promise((r) => agentChannel!.once('end', r));
    expect(agentChannel!.stats.bytesIn).toBe(written);
  });

  it('half-closes: eof from one side still lets the other side answer', async () => {
    const p = await pair(async (ch) => {
      const parts: Buffer[] = [];
      ch.on('data', (d: Buffer) => parts.push(d));
      ch.on('end', () => ch.end(Buffer.concat(parts).toString().toUpperCase()));
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    const answer: Buffer[] = [];
    channel.on('data', (d: Buffer) => answer.push(d));
    channel.end('question');
    await new Promise((r) => channel.once('end', r));
    expect(Buffer.concat(answer).toString()).toBe('QUESTION');
  });

  it('reports a refused open as an error and a dropped connection as closed channels', async () => {
    const p = await pair(async (ch) => {
      if ((ch.params as { port: number }).port === 80) throw new Error('port 80 refused on the device');
    });
    cleanup = p.close;
    await expect(p.broker.open('tunnel', { proto: 'tcp', port: 80, dst: 'x' })).rejects.toThrow(/port 80 refused/);
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 22, dst: 'x' });
    const closed = new Promise((r) => channel.once('close', r));
    p.agent.ws.terminate();
    await closed;
    expect(p.broker.openChannels).toBe(0);
  });

  it('carries channel control messages', async () => {
    const p = await pair(async (ch) => {
      ch.on('control', (msg) => {
        if (msg.type === 'resize') ch.control({ type: 'exit', code: msg.cols, signal: null });
      });
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    const exit = new Promise<any>((r) => channel.once('control', r));
    channel.control({ type: 'resize', cols: 120, rows: 40 });
    expect(await exit).toEqual({ type: 'exit', code: 120, signal: null });
  });
});

describe('mux control before a listener', () => {
  it('holds a channel control message that arrives before anyone listens', async () => {
    const p = await pair(async (ch) => {
      // Sent at once with the open answer: the broker side has no listener yet.
      setImmediate(() => ch.control({ type: 'meta', size: 7, mode: 0o644 }));
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('copy', { direction: 'download', path: '/x' });
    await new Promise((r) => setTimeout(r, 50));
    const meta = await new Promise<any>((r) => channel.once('control', r));
    expect(meta).toEqual({ type: 'meta', size: 7, mode: 0o644 });
  });
});

describe('mux enforcement of what the peer sends', () => {
  /** The agent end's raw socket, to send what a hostile agent would; resolves with the close code it sees. */
  async function hostilePair() {
    const p = await pair(async () => {}, 64 * 1024);
    cleanup = p.close;
    const errors: MuxProtocolError[] = [];
    p.broker.on('protocol-error', (err: MuxProtocolError) => errors.push(err));
    const closed = new Promise<number>((resolve) => p.agent.ws.once('close', (code) => resolve(code)));
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    return { p, errors, closed, channel };
  }

  it('closes the connection with a protocol error when data arrives beyond the granted window', async () => {
    const { p, errors, closed, channel } = await hostilePair();
    // Nobody reads on the broker side, so no credit comes back: the window is all the agent may send.
    p.agent.ws.send(encodeData(channel.id, Buffer.alloc(64 * 1024)), { binary: true });
    p.agent.ws.send(encodeData(channel.id, Buffer.alloc(1)), { binary: true });
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.creditExceeded]);
    expect(channel.readableLength).toBeLessThanOrEqual(64 * 1024);
    expect(channel.destroyed).toBe(true);
  });

  it('refuses a grant that would push credit above the bound', async () => {
    const { p, errors, closed, channel } = await hostilePair();
    p.agent.ws.send(JSON.stringify({ t: 'credit', ch: channel.id, n: MAX_CHANNEL_CREDIT }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.creditOverflow]);
  });

  it('refuses a grant that is not a positive whole number', async () => {
    const { p, errors, closed, channel } = await hostilePair();
    p.agent.ws.send(JSON.stringify({ t: 'credit', ch: channel.id, n: '1e9' }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.creditOverflow]);
  });

  it('closes after repeated unreadable frames, reporting only the first', async () => {
    const { p, errors, closed } = await hostilePair();
    for (let i = 0; i <= MAX_PROTOCOL_ERRORS + 5; i++) p.agent.ws.send(i % 2 ? 'not json' : '"a string"');
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors).toHaveLength(1);
    expect(errors[0].code).toBe(MuxErrorCode.unreadable);
    expect(p.broker.protocolErrors).toBe(MAX_PROTOCOL_ERRORS + 1);
  });

  it('closes a peer that keeps opening channels on the side that does not serve them', async () => {
    const { p, errors, closed } = await hostilePair();
    for (let i = 0; i <= MAX_PROTOCOL_ERRORS; i++) p.agent.ws.send(JSON.stringify({ t: 'open', ch: 1000 + i, kind: 'console', params: { cols: 1, rows: 1 } }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.unexpected]);
  });

  it('tolerates a few unreadable frames without closing', async () => {
    const { p, errors, channel } = await hostilePair();
    for (let i = 0; i < MAX_PROTOCOL_ERRORS; i++) p.agent.ws.send('not json');
    // Still open: a control message after them arrives.
    const control = new Promise((r) => channel.once('control', r));
    p.agent.ws.send(JSON.stringify({ t: 'ctl', ch: channel.id, msg: { type: 'exit', code: 0, signal: null } }));
    expect(await control).toEqual({ type: 'exit', code: 0, signal: null });
    expect(errors).toHaveLength(1);
  });

  it('cuts a peer that leaves more than the bound unread instead of queueing to it', async () => {
    const p = await pair(async () => {}, 64 * 1024);
    cleanup = p.close;
    const broker = new Mux(p.broker.ws, { maxUnreadBytes: 256 * 1024 });
    const closed = new Promise<string>((r) => broker.once('close', r));
    p.agent.ws.pause(); // the agent stops reading
    for (let i = 0; i < 10_000 && broker.closeCode === undefined; i++) broker.send({ t: 'inventory', data: { filler: 'x'.repeat(4096) } });
    expect(await closed).toMatch(/not reading/);
    expect(broker.closeCode).toBe(AgentClose.peerNotReading);
    expect(p.broker.ws.bufferedAmount).toBeLessThanOrEqual(256 * 1024 + 8192);
  });
});
