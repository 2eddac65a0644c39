/**
 * Files for configuration under load: at most 64 are sent at once; further requests wait their turn
 * in a bounded queue (first come, first served) instead of being refused, and a device still gets no
 * more than 4 in transfer or waiting. Agents here hold their channels unread (no credit returned), so
 * each transfer keeps its slot until the test lets it finish.
 */
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deviceIdOf, publicKeyPem } from '../../shared/device-key.js';
import { Mux, type Channel } from '../../shared/mux.js';
import { connectDevice, eventually, type FakeConnection } from '../support/agent.js';
import { approvedDeviceRow, startTestBroker, type TestBroker } from '../support/broker.js';
import { FROM_BROKER } from '../../shared/wire.js';

let t: TestBroker;
const DEVICES = 17; // 17 × 4 = 68 requests: 64 slots and 4 waiting
const BIG = Buffer.alloc(3 * 1024 * 1024, 7); // larger than a channel's window: an unread transfer stalls

interface Sim {
  id: string;
  conn: FakeConnection;
  channels: Channel[];
  received: Map<string, number>;
}
const sims: Sim[] = [];

beforeAll(async () => {
  // every fake agent connects from 127.0.0.1
  t = await startTestBroker({ env: { AGENT_HANDSHAKES_PER_ADDRESS: '64' } });
  await t.addGroup({ id: 'load' });
  const f = new FormData();
  f.append('path', '/');
  f.append('file', new Blob([new Uint8Array(BIG)]), 'big.bin');
  expect((await t.api('POST', '/api/v2/file', { token: t.adminToken, body: f })).status).toBe(200);
  const commit = await t.api('POST', '/api/v2/commit', {
    token: t.adminToken,
    body: {
      action: 'commit',
      message: 'big file',
      changes: [{ node_id: 'load', formtype: 'file_distribution', config: { files: [{ templates: [{ source: '/big.bin', destination: '/opt/big.bin' }] }] } }],
    },
  });
  expect(commit.status).toBe(200);
  const now = new Date().toISOString();
  for (let i = 0; i < DEVICES; i++) {
    const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    const id = deviceIdOf(publicKey);
    await t.broker.services.store.db
      .insertInto('devices')
      .values({ ...approvedDeviceRow(id, `load-${i}`, '{}', now), public_key: publicKeyPem(publicKey) })
      .execute();
    await t.broker.services.store.db
      .insertInto('nodes')
      .values({ node_id: id, parent_id: 'load', type: 'device', title: `load-${i}`, tags: '[]', created_at: now })
      .execute();
    const conn = await connectDevice(t.url, { id, privateKey, publicKeyPem: publicKeyPem(publicKey) });
    const sim: Sim = { id, conn, channels: [], received: new Map() };
    new Mux(conn.ws, {
      receives: FROM_BROKER,
      // opened but not read: the broker's transfer stops at the window and keeps its slot
      onOpen: async (channel: Channel) => {
        sim.channels.push(channel);
        return {};
      },
    });
    sims.push(sim);
  }
});
afterAll(async () => {
  for (const s of sims) s.conn.ws.terminate();
  await t?.close();
});

const refusals = () => sims.flatMap((s) => s.conn.messages.filter((m) => m.t === 'file_refused'));
const opened = () => sims.reduce((n, s) => n + s.channels.length, 0);

describe('configuration files under load', () => {
  it('queues requests beyond the 64 transfer slots, refuses a fifth per device, and serves the queue as slots free', async () => {
    for (const s of sims) for (let r = 0; r < 4; r++) s.conn.send({ t: 'file_request', id: `r${r}`, path: '/big.bin' });
    await eventually(() => opened() === 64, 30_000, '64 transfers open');
    // the four others wait: not refused, not opened
    await new Promise((r) => setTimeout(r, 300));
    expect(opened()).toBe(64);
    expect(refusals()).toEqual([]);

    // a device with 4 requests sent or waiting is refused a fifth
    const busy = sims.find((s) => s.channels.length === 4)!;
    busy.conn.send({ t: 'file_request', id: 'r5', path: '/big.bin' });
    await eventually(() => refusals().length === 1);
    expect(refusals()[0]).toMatchObject({ id: 'r5', error: expect.stringContaining('busy') });

    // reading one device's transfers to the end frees their slots for the waiting requests
    const drained = sims.find((s) => s.channels.length === 4 && s !== busy)!;
    let done = 0;
    for (const ch of drained.channels) {
      let bytes = 0;
      ch.on('data', (c: Buffer) => (bytes += c.length));
      ch.on('end', () => {
        if (bytes === BIG.length) done += 1;
      });
    }
    await eventually(() => done === 4, 30_000, 'the drained transfers to complete');
    await eventually(() => opened() === 68, 30_000, 'the waiting requests to be served');
    expect(sims.every((s) => s.channels.length === 4)).toBe(true);
    expect(refusals()).toHaveLength(1);
  });
});
