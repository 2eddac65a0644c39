/**
 * The agent's updater over a real mux pair with a fake broker end: the announcement, the
 * policy (off, window, downgrade), and hostile downloads (a sha256 other than announced, a
 * truncated transfer, an oversized announcement). Nothing is installed without the exact bytes.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Mux } from '../../shared/mux.js';
import type { ControlMessage } from '../../shared/protocol.js';
import { muxPair } from '../../test/support/mux-pair.js';
import { DEFAULT_UPDATE_POLICY } from '../config/bundle.js';
import { decide, Updater } from './updater.js';
import { FROM_BROKER, readMessage, type AgentMessage, type BrokerMessage } from '../../shared/wire.js';

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

type Mode = 'honest' | 'other-bytes' | 'truncated' | 'refuse';

async function setup(mode: Mode, bundle = 'console.log("agent 2.0.0");\n') {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-updater-')));
  const packageDir = path.join(dir, 'pkg');
  fs.mkdirSync(path.join(packageDir, 'node_modules'), { recursive: true });
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const logs: { level: string; msg: string; detail?: Record<string, unknown> }[] = [];
  const restarts: string[] = [];
  const updater = new Updater({
    stateDir: path.join(dir, 'state'),
    version: '1.0.0',
    install: { packageDir, packageVersion: '1.0.0', launched: false },
    log: (level, msg, detail) => void logs.push({ level, msg, detail }),
    restart: (v) => void restarts.push(v),
  });
  const pair = await muxPair((channel) => updater.handleChannel(channel));
  cleanups.push(() => pair.close());
  const requests: ControlMessage[] = [];
  const broker: Mux<AgentMessage> = pair.broker;
  broker.on('control', (msg: AgentMessage) => {
    if (msg.t !== 'agent_update_request') return;
    requests.push(msg);
    if (mode === 'refuse') return void broker.send({ t: 'file_refused', id: msg.id, error: 'not published' });
    const bytes = Buffer.from(mode === 'other-bytes' ? 'process.exit(0) // not what was announced\n' : bundle);
    const sent = mode === 'truncated' ? bytes.subarray(0, 5) : bytes;
    void broker
      .open('file', { id: msg.id, path: `/agent/fleet-agent-${msg.version}.mjs`, size: bytes.length, sha256: sha(bytes) })
      .then(({ channel }) => {
        channel.resume();
        channel.end(sent);
      })
      .catch(() => {});
  });
  pair.agent.on('control', (msg: BrokerMessage) => updater.handleControl(msg));
  updater.attach((msg) => pair.agent.send(msg));
  cleanups.push(() => updater.detach());
  const announce = (version: string, content = bundle, size = Buffer.byteLength(content)) =>
    broker.send({ t: 'agent_update', version, sha256: sha(content), size });
  const versions = () => (fs.existsSync(path.join(dir, 'state', 'agent', 'versions')) ? fs.readdirSync(path.join(dir, 'state', 'agent', 'versions')) : []);
  const until = async (check: () => boolean) => {
    for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 20));
    return check();
  };
  return { updater, logs, restarts, requests, announce, versions, until, dir };
}

describe('agent updater', () => {
  it('downloads, checks and installs a newer version, then asks for a restart', async () => {
    const s = await setup('honest');
    s.announce('2.0.0');
    expect(await s.until(() => s.restarts.length === 1)).toBe(true);
    expect(s.restarts).toEqual(['2.0.0']);
    expect(s.versions()).toEqual(['2.0.0']);
    const installed = path.join(s.dir, 'state', 'agent', 'versions', '2.0.0');
    expect(fs.readFileSync(path.join(installed, 'fleet-agent.mjs'), 'utf8')).toBe('console.log("agent 2.0.0");\n');
    expect(fs.readlinkSync(path.join(installed, 'node_modules'))).toBe(path.join(s.dir, 'pkg', 'node_modules'));
    // No temporary download left behind.
    expect(fs.readdirSync(path.join(s.dir, 'state', 'agent', 'download'))).toEqual([]);
  });

  it('refuses bytes whose sha256 is not the announced one (even when the channel is self-consistent)', async () => {
    const s = await setup('other-bytes');
    s.announce('2.0.0');
    expect(await s.until(() => s.logs.some((l) => l.msg === 'agent update not installed'))).toBe(true);
    expect(String(s.logs.find((l) => l.msg === 'agent update not installed')?.detail?.err)).toContain('is not the one announced');
    expect(s.restarts).toEqual([]);
    expect(s.versions()).toEqual([]);
  });

  it('refuses a truncated download', async () => {
    const s = await setup('truncated');
    s.announce('2.0.0');
    expect(await s.until(() => s.logs.some((l) => l.msg === 'agent update not installed'))).toBe(true);
    expect(String(s.logs.find((l) => l.msg === 'agent update not installed')?.detail?.err)).toMatch(/received 5 bytes|interrupted/);
    expect(s.restarts).toEqual([]);
    expect(s.versions()).toEqual([]);
  });

  it('takes a refusal from the broker without installing anything', async () => {
    const s = await setup('refuse');
    s.announce('2.0.0');
    expect(await s.until(() => s.logs.some((l) => l.msg === 'agent update not installed'))).toBe(true);
    expect(String(s.logs.find((l) => l.msg === 'agent update not installed')?.detail?.err)).toContain('not published');
    expect(s.versions()).toEqual([]);
  });

  it('ignores malformed and oversized announcements, and a downgrade or auto_update off', async () => {
    const s = await setup('honest');
    // as the agent reads them (shared/wire.ts): each of these reads, the updater judges its values
    const send = (msg: { t: string } & Record<string, unknown>) => {
      const read = readMessage(FROM_BROKER, msg);
      expect(read).toMatchObject({ t: 'agent_update' });
      if (read && read !== 'unknown') s.updater.handleControl(read);
    };
    send({ t: 'agent_update', version: '../../etc', sha256: sha('x'), size: 1 });
    send({ t: 'agent_update', version: '2.0.0', sha256: 'nothex', size: 1 });
    send({ t: 'agent_update', version: '2.0.0', sha256: sha('x'), size: 1024 * 1024 * 1024 });
    send({ t: 'agent_update', version: '2.0.0', sha256: sha('x'), size: -1 });
    send({ t: 'agent_update', version: '0.9.0', sha256: sha('x'), size: 1 });
    s.updater.setPolicy({ enabled: false, downgrade: false });
    send({ t: 'agent_update', version: '2.0.0', sha256: sha('x'), size: 1 });
    await new Promise((r) => setTimeout(r, 100));
    expect(s.requests).toEqual([]);
    expect(s.logs.filter((l) => l.msg.includes('malformed') || l.msg.includes('size out of bounds'))).toHaveLength(4);
    expect(s.logs.some((l) => l.msg === 'agent update not installed: a downgrade (auto_update_downgrade is off)')).toBe(true);
    expect(s.logs.some((l) => l.msg === 'agent update not installed: auto_update is off')).toBe(true);
    // Turning it on acts on the offer kept.
    s.updater.setPolicy(DEFAULT_UPDATE_POLICY);
    expect(await s.until(() => s.requests.length === 1)).toBe(true);
  });
});

describe('update decision', () => {
  const offer = { version: '1.2.0', sha256: sha('x'), size: 1 };
  const at = (h: number, m: number) => new Date(2026, 0, 1, h, m);
  it('follows version order, the refused list and the window (wrapping past midnight)', () => {
    expect(decide(offer, '1.1.9', DEFAULT_UPDATE_POLICY, [], at(12, 0))).toEqual({ act: true });
    expect(decide(offer, '1.2.0', DEFAULT_UPDATE_POLICY, [], at(12, 0)).act).toBe(false);
    expect(decide(offer, '1.10.0', DEFAULT_UPDATE_POLICY, [], at(12, 0))).toEqual({ act: false, why: 'a downgrade (auto_update_downgrade is off)' });
    expect(decide(offer, '1.10.0', { enabled: true, downgrade: true }, [], at(12, 0))).toEqual({ act: true });
    expect(decide(offer, '1.1.0', DEFAULT_UPDATE_POLICY, ['1.2.0'], at(12, 0)).act).toBe(false);
    const night = { enabled: true, downgrade: false, window: { from: 23 * 60, to: 2 * 60 } };
    expect(decide(offer, '1.1.0', night, [], at(23, 30)).act).toBe(true);
    expect(decide(offer, '1.1.0', night, [], at(1, 59)).act).toBe(true);
    expect(decide(offer, '1.1.0', night, [], at(2, 0))).toEqual({ act: false, why: 'outside auto_update_window' });
    expect(decide(offer, '1.1.0', night, [], at(12, 0)).act).toBe(false);
  });
});
