/**
 * What the broker writes to agents at the two ends of their connections: the welcome and the
 * configuration leave in one socket write, and a stop cuts every agent without waiting for their
 * close handshakes (agents that never answer the close included).
 *
 * Both use fake timers for setTimeout only: what is asserted must happen without a timer firing
 * (no grace period waited out, no hold released by time), so nothing depends on the machine's speed.
 */
import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { AgentClose } from '../../shared/protocol.js';
import { connectDevice, enrolDevice, type FakeConnection } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let bootstrapKey: string;

beforeAll(async () => {
  t = await startTestBroker();
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  expect(key.status).toBeLessThan(300);
  bootstrapKey = Object.keys(key.body)[0];
});
afterAll(async () => {
  vi.useRealTimers();
  await t?.close();
});
afterEach(() => vi.useRealTimers());

/** The client side's socket under a connection (ws keeps it private). */
function socketOf(conn: FakeConnection): net.Socket {
  return (conn.ws as unknown as { _socket: net.Socket })._socket;
}

/** The bytes of a close frame the broker sends (unmasked, code in the first two payload bytes). */
function closeCodes(bytes: Buffer): number[] {
  const codes: number[] = [];
  for (let i = 0; i + 1 < bytes.length;) {
    const opcode = bytes[i] & 0x0f;
    let length = bytes[i + 1] & 0x7f;
    let at = i + 2;
    if (length === 126) {
      length = bytes.readUInt16BE(at);
      at += 2;
    } else if (length === 127) {
      length = Number(bytes.readBigUInt64BE(at));
      at += 8;
    }
    if (opcode === 0x8 && length >= 2) codes.push(bytes.readUInt16BE(at));
    i = at + length;
  }
  return codes;
}

describe('the welcome', () => {
  // On SQLite the configuration is rendered in the same turn as the welcome, and the mux's own
  // coalescing already puts both in one write; on PostgreSQL it comes after round trips to the database.
  it('leaves in the same socket write as the configuration', async () => {
    const { device } = await enrolDevice(t, bootstrapKey);
    // Every write the broker's sockets make, with the bytes of each.
    const writes: { socket: net.Socket; bytes: string }[] = [];
    const proto = net.Socket.prototype as unknown as {
      _write(chunk: Buffer, encoding: string, cb: () => void): void;
      _writev(chunks: { chunk: Buffer | string }[], cb: () => void): void;
    };
    const realWrite = proto._write;
    const realWritev = proto._writev;
    const spyWrite = vi.spyOn(proto, '_write').mockImplementation(function (this: net.Socket, chunk, encoding, cb) {
      writes.push({ socket: this, bytes: String(chunk) });
      realWrite.call(this, chunk, encoding, cb);
    });
    const spyWritev = vi.spyOn(proto, '_writev').mockImplementation(function (this: net.Socket, chunks, cb) {
      writes.push({ socket: this, bytes: chunks.map((c) => String(c.chunk)).join('') });
      realWritev.call(this, chunks, cb);
    });
    // The welcome is held until the configuration is sent, or for a while: here time stands still.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const conn = await connectDevice(t.url, device);
      expect(conn.welcome?.device_id).toBe(device.id);
      const port = socketOf(conn).localPort;
      const brokerWrites = writes.filter((w) => w.socket.remotePort === port);
      const welcome = brokerWrites.filter((w) => w.bytes.includes('"t":"welcome"'));
      expect(welcome).toHaveLength(1);
      expect(welcome[0].bytes).toContain('"t":"config"');
      vi.useRealTimers();
      conn.ws.close();
      await conn.closed;
    } finally {
      spyWrite.mockRestore();
      spyWritev.mockRestore();
    }
  });
});

describe('a stop with agents connected', () => {
  it('sends each the close and cuts it at once, without waiting for agents that never answer', async () => {
    const agents: { conn: FakeConnection; received: Buffer[]; gone: Promise<void> }[] = [];
    for (let i = 0; i < 12; i++) {
      const { device } = await enrolDevice(t, bootstrapKey);
      const conn = await connectDevice(t.url, device);
      expect(conn.welcome?.device_id).toBe(device.id);
      // From now on the agent reads what comes and never answers anything, the close included.
      const socket = socketOf(conn);
      socket.removeAllListeners('data');
      const received: Buffer[] = [];
      socket.on('data', (d: Buffer) => received.push(d));
      agents.push({ conn, received, gone: new Promise((resolve) => socket.once('close', () => resolve())) });
    }
    const hub = t.broker.services.agents;
    expect(hub.connectedDevices()).toHaveLength(agents.length);

    // No timer fires from here: a stop waiting out a grace period for the silent agents would never end.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    await hub.close();
    await Promise.all(agents.map((a) => a.gone));
    vi.useRealTimers();

    expect(hub.connectedDevices()).toEqual([]);
    for (const a of agents) expect(closeCodes(Buffer.concat(a.received))).toEqual([AgentClose.shutdown]);
  });
});
