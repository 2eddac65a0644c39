/**
 * The agent over TLS: the broker serves https itself (TLS_CERT_FILE/TLS_KEY_FILE); the agent
 * verifies its certificate, against the CA file it is given.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/environment.js';
import { createLogger } from '../../broker/logger.js';
import { startBroker, type RunningBroker } from '../../broker/server.js';
import { startAgent, type TestAgent } from '../support/agent.js';
import { selfSignedCertificate } from '../support/tls.js';

describe('agent over TLS', () => {
  let dir: string;
  let broker: RunningBroker;
  let tls: { cert: string; key: string };
  let other: { cert: string; key: string };
  const agents: TestAgent[] = [];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-tls-'));
    tls = selfSignedCertificate(dir, 'broker');
    other = selfSignedCertificate(dir, 'other');
    const config = loadConfig({
      DATA_DIR: path.join(dir, 'data'),
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      TLS_CERT_FILE: tls.cert,
      TLS_KEY_FILE: tls.key,
    });
    broker = await startBroker(config, createLogger('silent'));
    expect(broker.url).toMatch(/^https:/);
  });
  afterEach(async () => {
    await Promise.all(agents.splice(0).map((a) => a.close()));
  });
  afterAll(async () => {
    await broker?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('enrols and connects over https/wss when given the CA file', async () => {
    const { key } = await broker.services.enrol.createKey({ auto_accept: true }, null);
    const a = startAgent({ broker: broker.url, bootstrapKey: key, caFile: tls.cert });
    agents.push(a);
    const id = await a.deviceId();
    await a.waitForLog((l) => l.msg === 'connected to the broker');
    expect(broker.services.agents.isConnected(id)).toBe(true);
  });

  it('refuses a broker whose certificate it cannot verify', async () => {
    const { key } = await broker.services.enrol.createKey({ auto_accept: true }, null);
    for (const caFile of [undefined, other.cert]) {
      const a = startAgent({ broker: broker.url, bootstrapKey: key, caFile });
      agents.push(a);
      const failure = await a.waitForLog((l) => l.msg === 'enrolment failed: retrying');
      expect(String(failure.error)).toMatch(/self.signed|certificate/i);
      expect(broker.services.agents.connectedDevices()).not.toContain(await a.deviceId());
    }
  });
});
