/**
 * End to end: a real agent trusts only the broker it enrolled with. After enrolment another broker
 * (its own DATA_DIR and database, so its own signing key) takes the address. Not knowing the device,
 * its "enrol first" does not get the bootstrap key; knowing it (public key and all) and committing a
 * configuration for it, it is refused at the welcome and nothing is applied. The real broker back at the address is trusted again; an agent
 * with no pinned key (enrolled before brokers signed) pins the key its broker proves.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/environment.js';
import { createLogger } from '../../broker/logger.js';
import { startBroker } from '../../broker/server.js';
import { publicKeyPem } from '../../shared/device-key.js';
import type { ControlMessage } from '../../shared/protocol.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

function upload(folder: string, name: string, content: string): FormData {
  const f = new FormData();
  f.append('path', folder);
  f.append('file', new Blob([content]), name);
  return f;
}

describe('broker trust', () => {
  it('an agent refuses another broker at its broker’s address, applies nothing it sends, and trusts its own broker again', async () => {
    const real: TestBroker = await startTestBroker({ database: 'sqlite' });
    cleanups.push(() => fs.rmSync(real.dataDir, { recursive: true, force: true }));
    const key = await real.api('POST', '/api/v2/bootstrapkey', { token: real.adminToken, body: { auto_accept: true } });
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-trust-'));
    const configRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-trust-root-'));
    cleanups.push(() => {
      fs.rmSync(stateDir, { recursive: true, force: true });
      fs.rmSync(configRoot, { recursive: true, force: true });
    });
    const bootstrapKey = Object.keys(key.body as object)[0];
    const enrolling = startAgent({ broker: real.url, bootstrapKey, stateDir, configRoot });
    cleanups.push(() => enrolling.close());
    const id = await enrolling.waitConnected(real, 60_000);
    await enrolling.close();
    // The configuration the agent keeps (its broker's): it must stay what it is.
    const keptFile = path.join(stateDir, 'config.json');
    const kept = fs.existsSync(keptFile) ? fs.readFileSync(keptFile, 'utf8') : undefined;

    // Pinned at enrolment, beside the device key, root only.
    const pinnedFile = path.join(stateDir, 'broker-key.pem');
    expect(fs.readFileSync(pinnedFile, 'utf8')).toBe(real.broker.services.brokerKey.publicKeyPem);
    expect((fs.statSync(pinnedFile).mode & 0o777).toString(8)).toBe('600');

    // Another broker at the same address: a fresh DATA_DIR and database, hence another key.
    const port = real.broker.port;
    await real.broker.close();
    const impostor = await startTestBroker({ database: 'sqlite', env: { PORT: String(port) } });
    cleanups.push(() => impostor.close());
    expect(impostor.url).toBe(real.url);
    expect(impostor.broker.services.brokerKey.publicKeyPem).not.toBe(real.broker.services.brokerKey.publicKeyPem);

    // Not knowing the device, it answers "unknown device: enrol first" — to get the bootstrap key. The
    // agent (started with one) does not enrol with a broker that cannot prove the pinned key.
    const probed = startAgent({ broker: real.url, bootstrapKey, stateDir, configRoot });
    await probed.waitForLog((l) => l.msg.startsWith('the broker did not prove the pinned key when refusing this device'), 30_000);
    await probed.waitForLog((l) => l.msg === 'the broker does not accept this device key' && probed.logs.indexOf(l) > 0, 30_000);
    await probed.close();
    expect(probed.logs.filter((l) => /^enrol|^Enrolment/i.test(l.msg))).toEqual([]);
    expect(await impostor.broker.services.store.db.selectFrom('devices').select('device_id').execute()).toEqual([]);

    // It knows the device as well as the real broker does (its public key: it lets the agent in).
    await impostor.addDevice({ id });
    const devicePublicKey = crypto.createPublicKey(crypto.createPrivateKey(fs.readFileSync(path.join(stateDir, 'device-key.pem'))));
    await impostor.broker.services.store.db
      .updateTable('devices')
      .set({ public_key: publicKeyPem(devicePublicKey) })
      .where('device_id', '=', id)
      .execute();
    // What it sends the device is watched (not changed).
    const sent: ControlMessage['t'][] = [];
    const hub = impostor.broker.services.agents;
    const send = hub.send.bind(hub);
    hub.send = (deviceId, msg) => {
      if (deviceId === id) sent.push(msg.t);
      return send(deviceId, msg);
    };
    const file = await impostor.api('POST', '/api/v2/file', { token: impostor.adminToken, body: upload('/evil/', 'motd.tpl', 'owned\n') });
    expect(file.status).toBe(200);
    const committed = await impostor.api('POST', '/api/v2/commit', {
      token: impostor.adminToken,
      body: {
        action: 'commit',
        message: 'take over',
        changes: [
          {
            node_id: id,
            formtype: 'file_distribution',
            extend: false,
            config: { files: [{ label: 'motd', templates: [{ source: '/evil/motd.tpl', destination: '/etc/motd', is_template: false }] }] },
          },
        ],
      },
    });
    expect(committed.status).toBe(200);

    // The enrolled agent starts again, at the same address.
    const agent: TestAgent = startAgent({ broker: real.url, bootstrapKey, stateDir, configRoot });
    cleanups.push(() => agent.close());

    // The impostor welcomed the agent and sent it the configuration; the agent refused it at the welcome.
    await eventually(() => sent.includes('config'), 30_000, 'the impostor to send the configuration');
    const refused = await agent.waitForLog((l) => l.msg.startsWith('broker refused: it did not prove the pinned key'), 30_000);
    expect(String(refused.error)).toContain('another server answers at this address');
    // More attempts, every one refused; nothing applied, nothing kept, the pin unchanged.
    await agent.waitForLog((l) => l.msg.startsWith('broker refused') && agent.logs.indexOf(l) > agent.logs.indexOf(refused), 30_000);
    expect(agent.logs.filter((l) => l.msg === 'connected to the broker' || l.msg === 'configuration received')).toEqual([]);
    expect(fs.existsSync(path.join(configRoot, 'etc', 'motd'))).toBe(false);
    expect(fs.existsSync(keptFile) ? fs.readFileSync(keptFile, 'utf8') : undefined).toBe(kept);
    expect(kept ?? '').not.toContain(committed.body.sha);
    expect(fs.readFileSync(pinnedFile, 'utf8')).toBe(real.broker.services.brokerKey.publicKeyPem);
    const reports = await impostor.api('GET', `/api/v2/reportlist?node_id=${id}&bundle=file_distribution`, { token: impostor.adminToken });
    expect(reports.body.total).toBe(0);

    // The real broker back at its address (its DATA_DIR, its key): trusted again.
    await impostor.broker.close();
    const back = await startBroker(
      loadConfig({
        DATA_DIR: real.dataDir,
        PORT: String(port),
        HOST: '127.0.0.1',
        ADMIN_EMAIL: ADMIN.email,
        ADMIN_PASSWORD: ADMIN.password,
        LOG_LEVEL: 'silent',
      }),
      createLogger('silent'),
    );
    cleanups.push(() => back.close());
    await eventually(() => back.services.agents.isConnected(id), 30_000, 'the agent to reconnect to its own broker');

    // Its own broker, having lost the device (a database restored from before it enrolled), proves its
    // key in the refusal: the agent enrols again there with its bootstrap key.
    await back.services.store.db.deleteFrom('devices').where('device_id', '=', id).execute();
    await back.services.store.db.deleteFrom('nodes').where('node_id', '=', id).execute();
    const lost = agent.logs.length;
    back.services.agents.release(id, 'test: the broker forgot this device');
    await agent.waitForLog((l) => l.msg === 'enrolled and approved', 30_000, lost);
    await eventually(() => back.services.agents.isConnected(id), 30_000, 'the agent to connect after enrolling again');

    // A device enrolled before brokers signed (no pinned key) learns the key at its next connection.
    await agent.close();
    fs.rmSync(pinnedFile);
    const older = startAgent({ broker: real.url, stateDir, configRoot });
    cleanups.push(() => older.close());
    await older.waitForLog((l) => l.msg === 'broker key pinned', 30_000);
    expect(fs.readFileSync(pinnedFile, 'utf8')).toBe(back.services.brokerKey.publicKeyPem);
    expect((fs.statSync(pinnedFile).mode & 0o777).toString(8)).toBe('600');
  });
});
