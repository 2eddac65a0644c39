import { afterEach, describe, expect, it } from 'vitest';
import { muxPair } from '../test/support/mux-pair.js';
import { MAX_PROTOCOL_ERRORS, Mux } from './mux.js';
import { AgentClose, MuxErrorCode } from './protocol.js';
import { REPORT_LIMITS } from './reports.js';
import {
  CHANNEL_MESSAGES,
  FROM_AGENT,
  FROM_BROKER,
  FROM_PEER,
  parseEnvelope,
  readMessage,
  type AgentMessage,
  type BrokerMessage,
  type PeerMessage,
} from './wire.js';

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

const read = <M extends { t: string }>(table: Parameters<typeof readMessage<M>>[0], msg: object) => readMessage(table, msg as { t: string });
const report = { bundle: 'ntp', bundle_commit_id: 'a', commit_id: 'b', labels: '', sev: 'ERR', text: 'failed', ts: 5, log: 'b2s=' };

/** Waits until `check` holds (the machine may be loaded: no fixed sleeps). */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(check()).toBe(true);
}

describe('wire readers', () => {
  it('read only objects with a string type', () => {
    expect(parseEnvelope('{"t":"reload","id":"a"}')).toEqual({ t: 'reload', id: 'a' });
    for (const text of ['not json', '"a string"', '[{"t":"x"}]', '{"t":5}', 'null']) expect(parseEnvelope(text)).toBeUndefined();
  });

  it('a close always reads (a dropped close would leave its channel open): an overlong sentence cut, an unknown code left out', () => {
    expect(read(CHANNEL_MESSAGES, { t: 'close', ch: 3, error: 'x'.repeat(5000), code: 'something_newer' })).toEqual({
      t: 'close',
      ch: 3,
      error: 'x'.repeat(1000),
    });
    expect(read(CHANNEL_MESSAGES, { t: 'close', ch: 3, code: 'path_outside_grant' })).toEqual({ t: 'close', ch: 3, code: 'path_outside_grant' });
    expect(read(CHANNEL_MESSAGES, { t: 'close', ch: 'three' })).toBeUndefined();
  });

  it('agent → broker: a known type of the wrong shape does not read; an unknown one is left alone', () => {
    expect(read(FROM_AGENT, { t: 'reload_ack', id: 5 })).toBeUndefined();
    expect(read(FROM_AGENT, { t: 'inventory', data: 'x' })).toBeUndefined();
    expect(read(FROM_AGENT, { t: 'file_request', id: 5, path: '/a' })).toBeUndefined();
    expect(read(FROM_AGENT, { t: 'file_request', id: 'a1', path: ['..'] })).toEqual({ t: 'file_request', id: 'a1', path: '' });
    expect(read(FROM_AGENT, { t: 'metrics', samples: 'all' })).toBeUndefined();
    expect(read(FROM_AGENT, { t: 'config_applied', commit_id: { evil: true }, reports: [] })).toBeUndefined();
    expect(read(FROM_AGENT, { t: 'config_applied', commit_id: 'x'.repeat(129) })).toBeUndefined();
    expect(read(FROM_AGENT, { t: 'something_newer', x: 1 })).toBe('unknown');
    // what only a broker sends is not taken from an agent
    expect(read(FROM_AGENT, { t: 'config', config: {} })).toBe('unknown');
    expect(read(FROM_AGENT, { t: '__messages' })).toBe('unknown');
  });

  it('reports are read once, with one set of limits, each bad report refused alone', () => {
    const msg = read(FROM_AGENT, {
      t: 'config_applied',
      commit_id: 'abc',
      reports: [
        { ...report, extra: 1 },
        { ...report, labels: 'l'.repeat(REPORT_LIMITS.labels) },
        { ...report, labels: 'l'.repeat(REPORT_LIMITS.labels + 1) },
        { ...report, sev: 'LOUD' },
        7,
      ],
    });
    expect(msg).toMatchObject({ t: 'config_applied', commit_id: 'abc', reports: { refused: { too_long: 1, bad_severity: 1, not_an_object: 1 } } });
    const valid = (msg as Extract<AgentMessage, { t: 'config_applied' }>).reports.valid;
    expect(valid).toHaveLength(2);
    expect(valid[0]).toEqual(report); // unknown fields left out
    // a list beyond the bound is refused whole, and the reports of a `reports` message alike
    expect(read(FROM_AGENT, { t: 'reports', reports: Array.from({ length: REPORT_LIMITS.perMessage + 1 }, () => report) })).toEqual({
      t: 'reports',
      reports: { valid: [], refused: { too_many: REPORT_LIMITS.perMessage + 1 } },
    });
    expect(read(FROM_AGENT, { t: 'reports', reports: { 0: report } })).toBeUndefined();
  });

  it('broker → agent and broker ↔ broker messages of the wrong shape do not read', () => {
    expect(read(FROM_BROKER, { t: 'reload', id: 'r1', mode: 'format-disk' })).toBeUndefined();
    expect(read(FROM_BROKER, { t: 'file_refused', id: 'f1' })).toBeUndefined();
    expect(read(FROM_BROKER, { t: 'agent_update', version: 2, sha256: 'x', size: 1 })).toBeUndefined();
    expect(read(FROM_BROKER, { t: 'config', config: 'all' })).toBeUndefined();
    expect(read(FROM_BROKER, { t: 'reload', id: 'r1', mode: 'run' })).toEqual({ t: 'reload', id: 'r1', mode: 'run' });
    expect(read(FROM_PEER, { t: 'peer_reload', id: 'a', device: 5 })).toBeUndefined();
    expect(read(FROM_PEER, { t: 'peer_reload_done', id: 'a', error: { stack: [] } })).toBeUndefined();
    expect(read(FROM_PEER, { t: 'peer_reload', id: 'x'.repeat(101), device: 'd' })).toBeUndefined();
    // agent messages are not link-level ones
    expect(read(FROM_PEER, { t: 'reports', reports: [] })).toBe('unknown');
  });
});

describe('a peer sending messages that do not read', () => {
  async function pair() {
    const p = await muxPair(async () => ({}));
    closers.push(p.close);
    const atBroker: AgentMessage[] = [];
    const atAgent: BrokerMessage[] = [];
    p.broker.on('control', (msg) => atBroker.push(msg));
    p.agent.on('control', (msg) => atAgent.push(msg));
    const closed = new Promise<number | undefined>((r) => p.broker.once('close', () => r(p.broker.closeCode)));
    return { p, atBroker, atAgent, closed };
  }

  it('an agent: a wrong-typed field is a protocol error, never handed on; it is closed past the bound', async () => {
    const { p, atBroker, closed } = await pair();
    p.agent.ws.send(JSON.stringify({ t: 'reload_ack', id: { toString: 1 } }));
    p.agent.ws.send(JSON.stringify({ t: 'file_request', id: ['f1'], path: '/a' }));
    p.agent.ws.send(JSON.stringify({ t: 'something_newer' }));
    p.agent.ws.send(JSON.stringify({ t: 'inventory', data: { os: 'linux' } }));
    await until(() => atBroker.length === 1);
    expect(atBroker).toEqual([{ t: 'inventory', data: { os: 'linux' } }]);
    expect(p.broker.protocolErrors).toBe(2);
    for (let i = 0; i < MAX_PROTOCOL_ERRORS; i++) p.agent.ws.send(JSON.stringify({ t: 'reports', reports: 'x'.repeat(1000) }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(atBroker).toHaveLength(1);
  });

  it('a broker: the agent hands nothing that does not read to its handlers', async () => {
    const { p, atAgent } = await pair();
    p.broker.ws.send(JSON.stringify({ t: 'file_refused', id: 7, error: 'x' }));
    p.broker.ws.send(JSON.stringify({ t: 'ctl', ch: 1, msg: 5 }));
    p.broker.ws.send(JSON.stringify({ t: 'reload', id: 'r1' }));
    await until(() => atAgent.length === 1);
    expect(atAgent).toEqual([{ t: 'reload', id: 'r1' }]);
    expect(p.agent.protocolErrors).toBe(2);
  });

  it('a broker peer: link-level messages read with their own table', async () => {
    const p = await muxPair(async () => ({}));
    closers.push(p.close);
    const link = new Mux<PeerMessage>(p.agent.ws, { receives: FROM_PEER });
    const heard: PeerMessage[] = [];
    const errors: string[] = [];
    link.on('control', (msg) => heard.push(msg));
    link.on('protocol-error', (err) => errors.push(err.code));
    p.broker.ws.send(JSON.stringify({ t: 'peer_reload', id: 'a', device: ['d'] }));
    p.broker.ws.send(JSON.stringify({ t: 'peer_reload_done', id: 'a' }));
    await until(() => heard.length === 1);
    expect(heard).toEqual([{ t: 'peer_reload_done', id: 'a' }]);
    expect(errors).toEqual([MuxErrorCode.unreadable]);
  });
});
