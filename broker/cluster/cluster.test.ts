import crypto from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRefusal } from '../../shared/codes.js';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { Mux, type Channel } from '../../shared/mux.js';
import { muxPair } from '../../test/support/mux-pair.js';
import { AgentNotConnectedError } from '../agents/hub.js';
import type { AgentLocator } from '../agents/locator.js';
import { loadConfig } from '../environment.js';
import { notifyChannel, parseClusterEvent } from './bus.js';
import { ClusterLocator, readRelayedParams } from './locator.js';
import { macMatches } from '../auth/credentials.js';
import { linkSilent, peerMac, type PeerLink } from './peer.js';
import { FROM_PEER, type PeerMessage } from '../../shared/wire.js';

const DEVICE = 'a'.repeat(64);
const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

describe('cluster events (NOTIFY payloads) are checked field by field', () => {
  it('reads the events it knows', () => {
    expect(parseClusterEvent(JSON.stringify({ e: 'presence', broker: 'b-1', device: DEVICE, on: true }))).toEqual({
      e: 'presence',
      broker: 'b-1',
      device: DEVICE,
      on: true,
    });
    expect(parseClusterEvent(JSON.stringify({ e: 'invalidate', broker: 'host:8080', extra: 1 }))).toEqual({ e: 'invalidate', broker: 'host:8080' });
    expect(parseClusterEvent(JSON.stringify({ e: 'device_removed', broker: 'b', device: DEVICE, reason: 'x'.repeat(500) }))).toMatchObject({
      reason: 'x'.repeat(120),
    });
    const end = { e: 'end_session', broker: 'b', to: 'a', session: '0f0e-1', by: { id: 'u1', email: 'op@example.com', name: 'Op' }, reason: 'maintenance' };
    expect(parseClusterEvent(JSON.stringify({ ...end, extra: 1 }))).toEqual(end);
    // From a broker of the version before: no name, no reason.
    const older = { e: 'end_session', broker: 'b', to: 'a', session: '0f0e-1', by: { id: 'u1', email: 'op@example.com' } };
    expect(parseClusterEvent(JSON.stringify(older))).toEqual({ ...older, by: { ...older.by, name: '' } });
    // An oversized reason is left out, an oversized name cut.
    expect(parseClusterEvent(JSON.stringify({ ...end, reason: 'r'.repeat(501), by: { ...end.by, name: 'n'.repeat(300) } }))).toEqual({
      ...older,
      by: { ...older.by, name: 'n'.repeat(200) },
    });
    const config = { e: 'config', broker: 'b', devices: [DEVICE, 'b'.repeat(64)] };
    expect(parseClusterEvent(JSON.stringify(config))).toEqual(config);
    const deliver = { e: 'deliver', broker: 'b', device: DEVICE, msg: { t: 'reload', id: 'x' } };
    expect(parseClusterEvent(JSON.stringify(deliver))).toEqual(deliver);
    const release = { e: 'agent_release', broker: 'b', version: '1.2.3', sha256: 'a'.repeat(64) };
    expect(parseClusterEvent(JSON.stringify({ ...release, file: '/etc/passwd' }))).toEqual(release);
  });

  it('drops anything else', () => {
    for (const payload of [
      undefined,
      '',
      'not json',
      '[]',
      'null',
      JSON.stringify({ e: 'presence', broker: 'b', device: 'not-a-device-id', on: true }),
      JSON.stringify({ e: 'presence', broker: 'b', device: DEVICE }),
      JSON.stringify({ e: 'presence', broker: 'bad id with spaces', device: DEVICE, on: false }),
      JSON.stringify({ e: 'device_removed', broker: 'b' }),
      JSON.stringify({ e: 'end_session', broker: 'b', to: 'a', session: 'NOT-HEX', by: { id: 'u', email: 'e' } }),
      JSON.stringify({ e: 'end_session', broker: 'b', to: 'bad id', session: 'ab', by: { id: 'u', email: 'e' } }),
      JSON.stringify({ e: 'end_session', broker: 'b', to: 'a', session: 'ab' }),
      JSON.stringify({ e: 'end_session', broker: 'b', to: 'a', session: 'ab', by: { id: '', email: 'e' } }),
      JSON.stringify({ e: 'end_session', broker: 'b', to: 'a', session: 'ab', by: { id: 'u', email: 'e'.repeat(400) } }),
      JSON.stringify({ e: 'shutdown_everything', broker: 'b' }),
      JSON.stringify({ e: 'config', broker: 'b', devices: [] }),
      JSON.stringify({ e: 'config', broker: 'b', devices: ['not-a-device'] }),
      JSON.stringify({ e: 'config', broker: 'b', devices: Array.from({ length: 81 }, () => DEVICE) }),
      JSON.stringify({ e: 'deliver', broker: 'b', device: DEVICE }),
      JSON.stringify({ e: 'deliver', broker: 'b', device: DEVICE, msg: { t: 'Bad Type' } }),
      JSON.stringify({ e: 'deliver', broker: 'b', device: DEVICE, msg: [] }),
      JSON.stringify({ e: 'deliver', broker: 'b', msg: { t: 'reload' } }),
      JSON.stringify({ e: 'invalidate', broker: 'b', pad: 'x'.repeat(8000) }),
      JSON.stringify({ e: 'agent_release', broker: 'b', version: '../1', sha256: 'a'.repeat(64) }),
      JSON.stringify({ e: 'agent_release', broker: 'b', version: '1.0.0', sha256: 'A'.repeat(64) }),
      JSON.stringify({ e: 'agent_release', broker: 'b', version: '1.0.0' }),
    ]) {
      expect(parseClusterEvent(payload)).toBeUndefined();
    }
  });

  it('delivers only what an agent takes from its broker: no handshake message, no configuration, none that does not read', () => {
    for (const msg of [
      { t: 'welcome', device_id: DEVICE, heartbeat_ms: 1000 },
      { t: 'unknown_device', broker_signature: 'x' },
      { t: 'auth', device_id: DEVICE, signature: 's' },
      // configurations go as `config` events: the broker holding the agent signs its own
      { t: 'config', config: {} },
      // known types that do not read
      { t: 'reload' },
      { t: 'reload', id: 'x', mode: 'wipe' },
      { t: 'file_refused', id: 'x' },
      // a type agents do not know
      { t: 'shell', command: 'rm -rf /' },
    ]) {
      expect(parseClusterEvent(JSON.stringify({ e: 'deliver', broker: 'b', device: DEVICE, msg }))).toBeUndefined();
    }
    const inventory = { e: 'deliver', broker: 'b', device: DEVICE, msg: { t: 'inventory', data: {} } };
    expect(parseClusterEvent(JSON.stringify(inventory))).toEqual(inventory);
  });

  it('listens on a channel of its own per schema', () => {
    const a = notifyChannel('t_one');
    expect(a).toMatch(/^[a-z0-9_]{1,63}$/);
    expect(notifyChannel('t_two')).not.toBe(a);
    expect(notifyChannel('')).toBe(notifyChannel('public'));
  });
});

describe('peer proofs', () => {
  it('bind the secret, the role, the nonce and both broker ids', () => {
    const mac = peerMac('s'.repeat(32), 'client', 'n1', 'b', 'a');
    expect(macMatches(mac, peerMac('s'.repeat(32), 'client', 'n1', 'b', 'a'))).toBe(true);
    for (const other of [
      peerMac('t'.repeat(32), 'client', 'n1', 'b', 'a'),
      peerMac('s'.repeat(32), 'server', 'n1', 'b', 'a'),
      peerMac('s'.repeat(32), 'client', 'n2', 'b', 'a'),
      peerMac('s'.repeat(32), 'client', 'n1', 'c', 'a'),
      peerMac('s'.repeat(32), 'client', 'n1', 'a', 'b'),
    ]) {
      expect(macMatches(other, mac)).toBe(false);
    }
    expect(macMatches(undefined, mac)).toBe(false);
    expect(macMatches(mac.slice(1), mac)).toBe(false);
    expect(macMatches({ length: mac.length }, mac)).toBe(false);
  });
});

describe('configuration of several brokers', () => {
  it('is off by default, on with CLUSTER_SECRET on PostgreSQL', () => {
    const single = loadConfig({ PORT: '9000' });
    expect(single.clusterSecret).toBeUndefined();
    expect(single.brokerId).toMatch(/:9000$/);
    const on = loadConfig({ DATABASE_URL: 'postgres://h/db', CLUSTER_SECRET: 'x'.repeat(32), BROKER_ID: 'b-1', BROKER_PEER_URL: 'http://10.0.0.2:8080/' });
    expect(on).toMatchObject({ clusterSecret: 'x'.repeat(32), brokerId: 'b-1', brokerPeerUrl: 'http://10.0.0.2:8080', clusterHeartbeatMs: 5000 });
    expect(loadConfig({ PORT: '0' }).brokerId).not.toBe(loadConfig({ PORT: '0' }).brokerId);
  });

  it('refuses a short secret, SQLite, a bad id or peer URL, naming the variable', () => {
    expect(() => loadConfig({ DATABASE_URL: 'postgres://h/db', CLUSTER_SECRET: 'short' })).toThrow(/CLUSTER_SECRET/);
    expect(() => loadConfig({ CLUSTER_SECRET: 'x'.repeat(32) })).toThrow(/CLUSTER_SECRET.*PostgreSQL/);
    expect(() => loadConfig({ BROKER_ID: 'a b' })).toThrow(/BROKER_ID/);
    expect(() => loadConfig({ BROKER_PEER_URL: 'http://h/path' })).toThrow(/BROKER_PEER_URL/);
  });
});

describe('peer link keep-alive', () => {
  it('cuts a link silent for 3 heartbeats, but not on a tick that came late because this process stalled', () => {
    const hb = 300;
    // on time (the last tick one heartbeat ago): silence past 3 heartbeats cuts, less does not
    expect(linkSilent(10_000, 10_000 - 3 * hb - 1, 10_000 - hb, hb)).toBe(true);
    expect(linkSilent(10_000, 10_000 - 3 * hb + 1, 10_000 - hb, hb)).toBe(false);
    // this process was stalled for 5 heartbeats: what the peer sent may wait unread; not cut on this tick
    expect(linkSilent(10_000, 10_000 - 5 * hb, 10_000 - 5 * hb, hb)).toBe(false);
  });
});

describe('one link used both ways (odd and even channel ids)', () => {
  it('lets both ends open channels at once, and refuses an open with the other end’s parity', async () => {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    const accepted = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
    const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    await new Promise((r) => client.once('open', r));
    const echo = async (channel: Channel) => {
      channel.pipe(channel);
      return { id: channel.id };
    };
    const dialling = new Mux(client, { channelIds: 'odd', onOpen: echo, receives: FROM_PEER });
    const answering = new Mux(await accepted, { channelIds: 'even', onOpen: echo, receives: FROM_PEER });
    try {
      const [one, two, three] = await Promise.all([
        dialling.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' }),
        answering.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' }),
        dialling.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' }),
      ]);
      expect([one.info.id, two.info.id, three.info.id]).toEqual([1, 2, 3]);
      for (const { channel } of [one, two, three]) {
        const back: Buffer[] = [];
        channel.on('data', (d: Buffer) => back.push(d));
        const ended = new Promise((r) => channel.once('end', r));
        channel.end(Buffer.from(`hello ${channel.id}`));
        await ended;
        expect(Buffer.concat(back).toString()).toBe(`hello ${channel.id}`);
      }
      // The answering end names an odd channel: the dialling end's own kind of id.
      const server = await accepted;
      const refusal = new Promise<Record<string, unknown>>((resolve) =>
        server.on('message', (d, isBinary) => {
          const msg = isBinary ? {} : JSON.parse(String(d));
          if (msg.t === 'close' && msg.ch === 101) resolve(msg);
        }),
      );
      server.send(JSON.stringify({ t: 'open', ch: 101, kind: 'tunnel', params: { proto: 'tcp', port: 1, dst: 'x' } }));
      expect(await refusal).toMatchObject({ error: 'channels cannot be opened from this side' });
      expect(dialling.protocolErrors).toBe(1);
    } finally {
      client.terminate();
      wss.close();
    }
  });
});

describe('the params of a channel a peer opens', () => {
  it('name the device it goes to, which its agent does not see; a channel naming none or a bad one is refused', () => {
    const params = { cols: 80, rows: 24 };
    expect(readRelayedParams({ ...params, peer_device: DEVICE } as never)).toEqual({ deviceId: DEVICE, params });
    for (const peer_device of [undefined, '', 'not-a-device', 7, { id: DEVICE }, DEVICE.toUpperCase()]) {
      expect(readRelayedParams({ ...params, ...(peer_device !== undefined ? { peer_device } : {}) } as never)).toBeUndefined();
    }
  });
});

describe('a channel relayed across two brokers (peer link, then agent link)', () => {
  const closers: Array<() => void> = [];
  afterEach(() => {
    for (const close of closers.splice(0)) close();
  });

  /** B (user's broker) → peer link → A (agent's broker) → agent link → agent; small windows so credit matters. */
  async function relay(agentOpen: (channel: Channel) => Promise<Record<string, unknown> | void>) {
    const agentLink = await muxPair(agentOpen, 64 * 1024);
    closers.push(agentLink.close);
    const onA: AgentLocator = {
      isConnected: (id) => id === DEVICE,
      open: async (id, kind, params) => {
        if (id !== DEVICE) throw new AgentNotConnectedError(id);
        return agentLink.broker.open(kind, params);
      },
      reload: async () => {},
      disconnect: () => {},
    };
    const nowhere: AgentLocator = {
      isConnected: () => false,
      open: async (id) => {
        throw new AgentNotConnectedError(id);
      },
      reload: async () => {},
      disconnect: () => {},
    };
    const peerLink = await muxPair((channel) => locatorA.serve(channel), 64 * 1024);
    closers.push(peerLink.close);
    const locatorA = new ClusterLocator(onA, { ownerOf: () => undefined, link: async () => Promise.reject(new Error('unused')), announceRemoved: () => {} });
    // the pair's broker end reads agent messages; this test sends no link-level ones
    const link: PeerLink = { peer: 'a', mux: peerLink.broker as unknown as Mux<PeerMessage>, outbound: true };
    const locatorB = new ClusterLocator(nowhere, { ownerOf: () => ({ id: 'a', url: 'http://a' }), link: async () => link, announceRemoved: () => {} });
    return { locatorB };
  }

  it('moves 4 MB each way with 64 KiB windows, the tail included, and relays channel control', async () => {
    const { locatorB } = await relay(async (channel) => {
      channel.pipe(channel); // an echo that ends when the input ends
      channel.on('control', (msg) => channel.control({ type: 'exit', code: (msg as { cols: number }).cols, signal: null }));
      return { echo: true };
    });
    const { channel, info } = await locatorB.open(DEVICE, 'tunnel', { proto: 'tcp', port: 1, dst: '127.0.0.1' });
    expect(info).toEqual({ echo: true });
    const controls: unknown[] = [];
    channel.on('control', (msg) => controls.push(msg));
    channel.control({ type: 'resize', cols: 7, rows: 1 });
    const data = crypto.randomBytes(4 * 1024 * 1024);
    const back: Buffer[] = [];
    channel.on('data', (d: Buffer) => back.push(d));
    const ended = new Promise((resolve) => channel.once('end', resolve));
    channel.end(data);
    await ended;
    expect(sha(Buffer.concat(back))).toBe(sha(data));
    expect(controls).toEqual([{ type: 'exit', code: 7, signal: null }]);
  });

  it('delivers what the agent sent before closing, though the user reads late', async () => {
    const data = crypto.randomBytes(1024 * 1024);
    const { locatorB } = await relay(async (channel) => {
      channel.resume();
      channel.end(data);
    });
    const { channel } = await locatorB.open(DEVICE, 'tunnel', { proto: 'tcp', port: 1, dst: '127.0.0.1' });
    channel.end();
    // The agent's bytes pile up at A (credit spent) until the user reads.
    await new Promise((r) => setTimeout(r, 300));
    const back: Buffer[] = [];
    channel.on('data', (d: Buffer) => back.push(d));
    await new Promise((resolve) => channel.once('close', resolve));
    expect(channel.errored).toBeNull();
    expect(sha(Buffer.concat(back))).toBe(sha(data));
  });

  it('carries the agent’s refusal code back, and a device not connected there as AgentNotConnectedError', async () => {
    const { locatorB } = await relay(async () => {
      throw new AgentRefusal('path_outside_grant', 'not under an allowed directory');
    });
    const refused = await locatorB.open(DEVICE, 'copy', { direction: 'download', path: '/etc/shadow' }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(AgentRefusal);
    expect(refused).toMatchObject({ code: 'path_outside_grant', message: 'not under an allowed directory' });
    const missing = await locatorB.open('b'.repeat(64), 'console', { cols: 80, rows: 24 }).catch((err: unknown) => err);
    expect(missing).toBeInstanceOf(AgentNotConnectedError);
  });

  it('ends the relayed channel with the reason when the peer link is lost', async () => {
    const { locatorB } = await relay(async (channel) => {
      channel.resume();
    });
    const { channel } = await locatorB.open(DEVICE, 'console', { cols: 80, rows: 24 });
    const closed = new Promise((resolve) => channel.once('close', resolve));
    // What PeerLinks does when the socket closes under a link.
    const mux = (channel as unknown as { mux: { close(code: number, reason: string): void } }).mux;
    mux.close(4002, 'the link to broker a was lost');
    await closed;
    expect(channel.errored?.message).toBe('the link to broker a was lost');
  });
});
