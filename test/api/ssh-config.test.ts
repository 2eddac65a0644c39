import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { saveCertificate, sshConfigBlock as cliSshConfigBlock, sshFiles } from '../../cli/ssh.js';
import { knownHostsLine, sshConfigBlock } from '../../shared/ssh-config.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let on: TestBroker;
let off: TestBroker;
beforeAll(async () => {
  [on, off] = await Promise.all([startTestBroker({ env: { SSH_PORT: '0' } }), startTestBroker()]);
});
afterAll(async () => {
  await Promise.all([on?.close(), off?.close()]);
});

describe('GET /api/v2/ssh/config', () => {
  it('answers a signed-in user without privileges the gateway, known_hosts line and the block fleet ssh-config writes', async () => {
    const token = await on.tokenWith([]);
    const r = await on.api('GET', '/api/v2/ssh/config', { token });
    expect(r.status).toBe(200);
    const url = on.url.replace(/\/+$/, '');
    const host = new URL(url).hostname;
    const port = on.broker.services.ssh.gateway.port as number;
    const key = `~/.config/fleet/ssh/${host}`;
    expect(r.body).toEqual({
      enabled: true,
      url,
      host,
      port,
      profile: host,
      known_hosts: knownHostsLine(url, port, on.broker.services.ssh.authority.hostPublicKey),
      ssh_config: sshConfigBlock(host, url, port, { key, cert: `${key}-cert.pub`, knownHosts: `${key}.known_hosts` }),
    });
    expect(r.body.known_hosts).toBe(`[${host}]:${port},*.${host} ${on.broker.services.ssh.authority.hostPublicKey}`);
    expect(r.body.ssh_config).toContain(`Host *.${host} !${host}.fleet-gateway`);
    expect(JSON.stringify(r.body)).not.toMatch(/PRIVATE KEY|cert-v01/);
  });

  it('is, byte for byte, what fleet login and fleet ssh-config write for the default profile', async () => {
    const r = await on.api('GET', '/api/v2/ssh/config', { token: on.adminToken });
    const { url, profile, port, known_hosts: knownHosts, ssh_config: block } = r.body;
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ssh-config-'));
    try {
      const env = { XDG_CONFIG_HOME: path.join(home, '.config') };
      expect(cliSshConfigBlock(profile, url, port, env).replaceAll(env.XDG_CONFIG_HOME, '~/.config')).toBe(block);
      fs.mkdirSync(sshFiles(profile, env).dir, { recursive: true });
      saveCertificate(
        profile,
        url,
        { certificate: 'cert', key_id: 'k', valid_before: '', host_key: on.broker.services.ssh.authority.hostPublicKey, ssh_port: port },
        env,
      );
      expect(fs.readFileSync(sshFiles(profile, env).knownHosts, 'utf8')).toBe(`${knownHosts}\n`);
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  });

  it('names PUBLIC_URL, not the Host header, when the operator set it', async () => {
    const pub = await startTestBroker({ env: { SSH_PORT: '0', PUBLIC_URL: 'https://fleet.example.com/' } });
    try {
      const r = await pub.api('GET', '/api/v2/ssh/config', { token: pub.adminToken, headers: { host: 'evil.example.net' } });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ url: 'https://fleet.example.com', host: 'fleet.example.com', profile: 'fleet.example.com' });
      expect(r.body.ssh_config).not.toContain('evil');
    } finally {
      await pub.close();
    }
  });

  it('answers enabled: false and nothing else when SSH_PORT is off', async () => {
    const r = await off.api('GET', '/api/v2/ssh/config', { token: await off.tokenWith([]) });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ enabled: false });
  });

  it('answers 401 without a sign-in or with a bad token, on both brokers', async () => {
    for (const t of [on, off]) {
      expect((await t.api('GET', '/api/v2/ssh/config')).status).toBe(401);
      const bad = await t.api('GET', '/api/v2/ssh/config', { token: 'not-a-token' });
      expect(bad.status).toBe(401);
      expect(bad.body).not.toHaveProperty('ssh_config');
    }
  });

  it('is described in the OpenAPI document', async () => {
    const r = await on.api('GET', '/api/v2/openapi.json');
    expect(r.body.paths['/api/v2/ssh/config'].get.description).toMatch(/SSH_PORT/);
  });
});
