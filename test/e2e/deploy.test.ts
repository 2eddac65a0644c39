/**
 * The deployment files of deploy/ as their own tools read them: HAProxy's config check on the
 * config (defaults and rendered with test ports), the compose file through `docker compose config`
 * where that tool is installed (else parsed as YAML and its services checked), and the broker's
 * systemd unit through `systemd-analyze verify`.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import yaml from 'js-yaml';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HAPROXY_BIN, HAPROXY_CFG, renderHaproxyConfig } from '../support/haproxy.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const DEPLOY = path.join(ROOT, 'deploy');
const BROKERS = ['broker1', 'broker2', 'broker3'];
let work: string;

const run = (cmd: string, args: string[], env: Record<string, string> = {}) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '', error: r.error };
};

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-deploy-'));
});
afterAll(() => {
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('deploy/haproxy.cfg', () => {
  it('is valid as committed (compose defaults) and rendered with other ports', () => {
    const plain = run(HAPROXY_BIN, ['-c', '-f', HAPROXY_CFG]);
    expect(plain.stdout + plain.stderr).toMatch(/Configuration file is valid/);
    expect(plain.code).toBe(0);
    const rendered = path.join(work, 'haproxy.cfg');
    const text = renderHaproxyConfig({
      FLEET_BIND: '127.0.0.1:18443',
      FLEET_BROKER1: '127.0.0.1:18001',
      FLEET_BROKER2: '127.0.0.1:18002',
      FLEET_BROKER3: '127.0.0.1:18003',
      FLEET_CHECK_INTER: '500ms',
      FLEET_MAXCONN: '1000',
    });
    expect(text).not.toMatch(/\$\{/);
    fs.writeFileSync(rendered, text);
    const checked = run(HAPROXY_BIN, ['-c', '-f', rendered]);
    expect(checked.stderr).not.toMatch(/WARNING|ALERT/);
    expect(checked.code).toBe(0);
    // A broken config is refused: the check is able to fail.
    fs.writeFileSync(rendered, text.replace('balance leastconn', 'balance nosuchalgorithm'));
    expect(run(HAPROXY_BIN, ['-c', '-f', rendered]).code).not.toBe(0);
  });

  it('checks the unauthenticated health route, replaces X-Forwarded-For and keeps WebSockets open', () => {
    const text = fs.readFileSync(HAPROXY_CFG, 'utf8');
    expect(text).toMatch(/^\s*http-check send meth GET uri \/api\/v2\/health /m);
    expect(text).toMatch(/^\s*http-check expect status 200$/m);
    expect(text).toMatch(/^\s*http-request del-header X-Forwarded-For$/m);
    expect(text).toMatch(/^\s*option forwardfor$/m);
    expect(text).toMatch(/^\s*timeout tunnel \S+$/m);
    expect(text).toMatch(/^\s*cookie FLEETSRV insert indirect nocache httponly$/m);
    for (const [i, b] of BROKERS.entries()) expect(text).toContain(`server ${b} "\${FLEET_${b.toUpperCase()}-${b}:8080}" cookie b${i + 1}`);
  });
});

describe('deploy/docker-compose.yml', () => {
  const file = path.join(DEPLOY, 'docker-compose.yml');
  const env = { CLUSTER_SECRET: 'c'.repeat(64), JWT_SECRET: 'j'.repeat(64) };

  function services(doc: any) {
    expect(Object.keys(doc.services).sort()).toEqual(['broker1', 'broker2', 'broker3', 'haproxy', 'postgres']);
    const ids = new Set<string>();
    for (const name of BROKERS) {
      const broker = doc.services[name];
      const environment = broker.environment;
      expect(environment).toMatchObject({ TRUST_PROXY: 'true', BROKER_ID: name, BROKER_PEER_URL: `http://${name}:8080`, SHUTDOWN_DRAIN_MS: '5000' });
      expect(environment.DATABASE_URL).toMatch(/^postgres:\/\/.*@postgres:5432\//);
      expect(environment.CLUSTER_SECRET).toBeDefined();
      expect(environment.JWT_SECRET).toBeDefined();
      expect(JSON.stringify(broker.build ?? {})).toContain('deploy/Containerfile');
      ids.add(environment.BROKER_ID);
    }
    expect(ids.size).toBe(3);
    expect(JSON.stringify(doc.services.haproxy.volumes)).toContain('haproxy.cfg');
    expect(JSON.stringify(doc.services.haproxy.ports)).toContain('8080');
  }

  it('is read by `docker compose config` where that tool exists, else parsed as YAML; both with the expected services', () => {
    const compose = run('docker', ['compose', 'version']);
    if (compose.code === 0) {
      const r = run('docker', ['compose', '-f', file, 'config', '--format', 'json'], env);
      expect(r.stderr).not.toMatch(/error/i);
      expect(r.code).toBe(0);
      services(JSON.parse(r.stdout));
      return;
    }
    console.log(`docker compose is not installed here (${(compose.stderr || String(compose.error ?? '')).trim().split('\n')[0]}): checking the file as YAML`);
    // js-yaml reads YAML 1.2 with merge keys, as compose does.
    const doc = yaml.load(fs.readFileSync(file, 'utf8')) as any;
    // Interpolation as compose does it for the values the test checks.
    const interpolated = JSON.parse(
      JSON.stringify(doc).replace(/\$\{([A-Z_]+)(?::?[-?][^}]*)?\}/g, (_m, name: string) => (env as Record<string, string>)[name] ?? ''),
    );
    services(interpolated);
  });

  it('builds the broker from the Containerfile in the repository, health-checked on /api/v2/health', () => {
    const containerfile = fs.readFileSync(path.join(DEPLOY, 'Containerfile'), 'utf8');
    expect(containerfile).toMatch(/^FROM node:\d+/m);
    expect(containerfile).toMatch(/^HEALTHCHECK .*/m);
    expect(containerfile).toContain('/api/v2/health');
    // The production build, run by node alone.
    expect(containerfile).toMatch(/npm run build:broker/);
    expect(containerfile).toMatch(/^CMD \["node", "--enable-source-maps", "dist\/broker\/main\.js"\]$/m);
    const ignore = fs.readFileSync(path.join(ROOT, '.dockerignore'), 'utf8').split('\n');
    expect(ignore).toContain('node_modules');
  });
});

describe('deploy/fleet-broker@.service', () => {
  it('systemd-analyze verifies an instance of it', () => {
    const unit = fs.readFileSync(path.join(DEPLOY, 'fleet-broker@.service'), 'utf8');
    expect(unit).toMatch(/^ExecStart=\/usr\/bin\/node --enable-source-maps dist\/broker\/main\.js$/m);
    expect(unit).toMatch(/^Environment=.*BROKER_ID=%H-%i/m);
    expect(unit).toMatch(/^EnvironmentFile=\/etc\/fleet-broker\/common\.env$/m);
    // ExecStart must name an executable that exists here for verify: the node running this test.
    const check = path.join(work, 'fleet-broker@1.service');
    fs.writeFileSync(check, unit.replace('ExecStart=/usr/bin/node', `ExecStart=${process.execPath}`));
    const verified = run('systemd-analyze', ['verify', check]);
    expect(verified.stderr).toBe('');
    expect(verified.code).toBe(0);
    // …and a broken unit is refused.
    fs.writeFileSync(check, unit.replace('[Service]', '[Service]\nType=nosuchtype'));
    const broken = run('systemd-analyze', ['verify', check]);
    expect(broken.code !== 0 || broken.stderr !== '').toBe(true);
  });
});
