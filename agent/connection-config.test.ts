/**
 * The configuration engine inside a real agent connection: a stand-in broker (WebSocket, handshake,
 * then a Mux) sends `config`; the agent asks for the template, gets it over a `file` channel,
 * renders it with a device attribute and answers `config_applied`.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { Mux } from '../shared/mux.js';
import type { ControlMessage } from '../shared/protocol.js';
import { BrokerEndpoint } from './broker-client.js';
import { ConfigEngine } from './config/engine.js';
import { AGENT_BUNDLES } from './config/registry.js';
import { runConnection } from './connection.js';
import { StateDir } from './identity.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

it('applies a configuration the broker sends over the agent connection', async () => {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-conn-config-')));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const template = Buffer.from('device={{ serial }}\n');
  const target = path.join(dir, 'out', 'device.conf');

  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  cleanups.push(() => wss.close());
  const applied = new Promise<Extract<ControlMessage, { t: 'config_applied' }>>((resolve) => {
    wss.on('connection', (ws) => {
      ws.once('message', () => {
        // the auth answer; a stand-in broker trusts it
        const mux = new Mux(ws);
        mux.on('control', (msg: ControlMessage) => {
          if (msg.t === 'file_request')
            void mux
              .open('file', { id: msg.id, path: msg.path, size: template.length, sha256: crypto.createHash('sha256').update(template).digest('hex') })
              .then(({ channel }) => {
                channel.resume();
                channel.end(template);
              });
          if (msg.t === 'config_applied') resolve(msg);
        });
        ws.send(JSON.stringify({ t: 'welcome', device_id: 'dev', heartbeat_ms: 60_000 }));
        mux.send({
          t: 'config',
          config: {
            commit_id: 'abc123',
            bundles: ['file_distribution'],
            bundle_data: { file_distribution: { enabled: true, files: [{ templates: [{ source: '/device.tmpl', destination: target, is_template: true }] }] } },
          },
          attributes: { serial: 'SN-0042' },
        });
      });
      ws.send(JSON.stringify({ t: 'challenge', nonce: 'n' }));
    });
  });

  const stateDir = path.join(dir, 'state');
  const engine = new ConfigEngine({ stateDir, bundles: AGENT_BUNDLES });
  cleanups.push(() => engine.stop());
  await engine.start();
  const controller = new AbortController();
  const ended = runConnection({
    endpoint: new BrokerEndpoint(`http://127.0.0.1:${(wss.address() as AddressInfo).port}`),
    identity: new StateDir(stateDir).identity(),
    version: 'test',
    log: pino({ level: 'silent' }),
    sessions: { stateDir, log: () => {} },
    inventory: async () => ({}),
    inventoryIntervalMs: 3_600_000,
    config: engine,
    signal: controller.signal,
  });
  const msg = await applied;
  expect(msg.commit_id).toBe('abc123');
  expect(msg.reports.map((r) => r.text)).toEqual([`Successfully rendered template file /device.tmpl to ${target}`]);
  expect(fs.readFileSync(target, 'utf8')).toBe('device=SN-0042\n');
  controller.abort();
  expect(await ended).toEqual({ kind: 'stopped' });
});
