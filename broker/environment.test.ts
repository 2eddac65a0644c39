import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, mapTileOrigins } from './environment.js';

describe('connection limits in the configuration', () => {
  it('defaults: 1024 agent handshakes, 32 per address, 256 connections per address', () => {
    const c = loadConfig({});
    expect([c.agentHandshakesMax, c.agentHandshakesPerAddress, c.maxConnectionsPerAddress]).toEqual([1024, 32, 256]);
  });

  it('has no connection cap per address behind a proxy unless one is set', () => {
    expect(loadConfig({ TRUST_PROXY: 'true' }).maxConnectionsPerAddress).toBe(0);
    expect(loadConfig({ TRUST_PROXY: 'true', MAX_CONNECTIONS_PER_ADDRESS: '50' }).maxConnectionsPerAddress).toBe(50);
  });

  it('accepts 64 new connections a second per address by default, none limited behind a proxy unless set', () => {
    expect(loadConfig({}).acceptRatePerAddress).toBe(64);
    expect(loadConfig({ ACCEPT_RATE_PER_ADDRESS: '0' }).acceptRatePerAddress).toBe(0);
    expect(loadConfig({ TRUST_PROXY: 'true' }).acceptRatePerAddress).toBe(0);
    expect(loadConfig({ TRUST_PROXY: 'true', ACCEPT_RATE_PER_ADDRESS: '20' }).acceptRatePerAddress).toBe(20);
    expect(() => loadConfig({ ACCEPT_RATE_PER_ADDRESS: '-1' })).toThrow(/ACCEPT_RATE_PER_ADDRESS/);
  });

  it('gives an agent 10 s to answer the challenge by default; AGENT_AUTH_TIMEOUT_MS sets 1 s to 120 s, and refuses others', () => {
    expect(loadConfig({}).agentAuthTimeoutMs).toBe(10_000);
    expect(loadConfig({ AGENT_AUTH_TIMEOUT_MS: '1000' }).agentAuthTimeoutMs).toBe(1000);
    for (const bad of ['999', '0', '120001', '-5', '2s']) expect(() => loadConfig({ AGENT_AUTH_TIMEOUT_MS: bad })).toThrow(/AGENT_AUTH_TIMEOUT_MS/);
  });

  it('re-authorizes live remote sessions every 2 s by default; REMOTE_RECHECK_MS sets 100 ms to 60 s, and refuses others', () => {
    expect(loadConfig({}).remoteRecheckMs).toBe(2000);
    expect(loadConfig({ REMOTE_RECHECK_MS: '250' }).remoteRecheckMs).toBe(250);
    for (const bad of ['99', '0', '60001', '-5', '2s']) expect(() => loadConfig({ REMOTE_RECHECK_MS: bad })).toThrow(/REMOTE_RECHECK_MS/);
  });

  it('closes an SSH connection not signed in after 20 s by default; SSH_AUTH_TIMEOUT_MS sets 1 s to 10 min, and refuses others', () => {
    expect(loadConfig({}).sshAuthTimeoutMs).toBe(20_000);
    expect(loadConfig({ SSH_AUTH_TIMEOUT_MS: '2000' }).sshAuthTimeoutMs).toBe(2000);
    for (const bad of ['999', '0', '600001', '-5', '2s']) expect(() => loadConfig({ SSH_AUTH_TIMEOUT_MS: bad })).toThrow(/SSH_AUTH_TIMEOUT_MS/);
  });

  it('waits 65 s for a PostgreSQL reply by default; DATABASE_QUERY_TIMEOUT_MS sets 10 s to 1 h, and refuses others', () => {
    expect(loadConfig({}).databaseQueryTimeoutMs).toBe(65_000);
    expect(loadConfig({ DATABASE_QUERY_TIMEOUT_MS: '20000' }).databaseQueryTimeoutMs).toBe(20_000);
    for (const bad of ['9999', '0', '3600001', '-5', '20s']) expect(() => loadConfig({ DATABASE_QUERY_TIMEOUT_MS: bad })).toThrow(/DATABASE_QUERY_TIMEOUT_MS/);
  });

  it('refuses a per-address handshake limit above the total, and bad numbers, naming the variable', () => {
    expect(() => loadConfig({ AGENT_HANDSHAKES_MAX: '8', AGENT_HANDSHAKES_PER_ADDRESS: '9' })).toThrow(ConfigError);
    expect(() => loadConfig({ AGENT_HANDSHAKES_PER_ADDRESS: '0' })).toThrow(/AGENT_HANDSHAKES_PER_ADDRESS/);
    expect(() => loadConfig({ MAX_CONNECTIONS_PER_ADDRESS: '-1' })).toThrow(/MAX_CONNECTIONS_PER_ADDRESS/);
  });
});

describe('recording retention in the configuration', () => {
  it('keeps files in DATA_DIR by default, in the database with FILE_STORE=db, and refuses anything else', () => {
    expect(loadConfig({}).fileStore).toBe('dir');
    expect(loadConfig({ FILE_STORE: 'db' }).fileStore).toBe('db');
    expect(() => loadConfig({ FILE_STORE: 'nfs' })).toThrow(/FILE_STORE/);
  });

  it('keeps recordings 90 days by default, and refuses a bad number naming the variable', () => {
    expect(loadConfig({}).recordingRetentionDays).toBe(90);
    expect(loadConfig({ RECORDING_RETENTION_DAYS: '7' }).recordingRetentionDays).toBe(7);
    expect(() => loadConfig({ RECORDING_RETENTION_DAYS: '0' })).toThrow(/RECORDING_RETENTION_DAYS/);
    expect(() => loadConfig({ RECORDING_RETENTION_DAYS: 'soon' })).toThrow(/RECORDING_RETENTION_DAYS/);
    expect(loadConfig({}).consoleDetachGraceSeconds).toBe(60);
    expect(loadConfig({ CONSOLE_DETACH_GRACE_SECONDS: '0' }).consoleDetachGraceSeconds).toBe(0);
    expect(() => loadConfig({ CONSOLE_DETACH_GRACE_SECONDS: '3601' })).toThrow(/CONSOLE_DETACH_GRACE_SECONDS/);
    expect(() => loadConfig({ CONSOLE_DETACH_GRACE_SECONDS: 'later' })).toThrow(/CONSOLE_DETACH_GRACE_SECONDS/);
  });
});

describe('map tiles in the configuration', () => {
  it('has none by default, and takes an http(s) URL template with {z}, {x} and {y}', () => {
    expect(loadConfig({}).mapTileUrl).toBeUndefined();
    expect(mapTileOrigins(undefined)).toEqual([]);
    const c = loadConfig({ MAP_TILE_URL: 'https://{s}.tiles.example.net/{z}/{x}/{y}.png', MAP_TILE_ATTRIBUTION: '© Example' });
    expect([c.mapTileUrl, c.mapTileAttribution]).toEqual(['https://{s}.tiles.example.net/{z}/{x}/{y}.png', '© Example']);
    expect(mapTileOrigins(c.mapTileUrl)).toEqual(['https://*.tiles.example.net']);
    expect(mapTileOrigins('http://127.0.0.1:9000/t/{z}/{x}/{y}.png')).toEqual(['http://127.0.0.1:9000']);
  });

  it('refuses a template that is not an http(s) URL or lacks a coordinate, naming the variable', () => {
    expect(() => loadConfig({ MAP_TILE_URL: 'https://tiles.example.net/{z}/{x}.png' })).toThrow(/MAP_TILE_URL.*\{y\}/);
    expect(() => loadConfig({ MAP_TILE_URL: 'javascript:alert(1)//{z}{x}{y}' })).toThrow(/MAP_TILE_URL/);
    expect(() => loadConfig({ MAP_TILE_URL: "https://a.example'; script-src *;/{z}/{x}/{y}" })).toThrow(/MAP_TILE_URL/);
    expect(() => loadConfig({ MAP_TILE_URL: 'https://a.example;script-src:1/{z}/{x}/{y}' })).toThrow(/MAP_TILE_URL/);
    expect(() => loadConfig({ MAP_TILE_URL: `https://tiles.example.net/${'a'.repeat(500)}/{z}/{x}/{y}` })).toThrow(/MAP_TILE_URL/);
  });
});

describe('device web UIs in the configuration', () => {
  it('has no apps host by default; takes a host name with an optional port, lower-cased; refuses anything else naming APPS_HOST', () => {
    expect(loadConfig({}).appsHost).toBeUndefined();
    expect(loadConfig({ APPS_HOST: 'Apps.Example.com' }).appsHost).toBe('apps.example.com');
    expect(loadConfig({ APPS_HOST: 'localhost:8080' }).appsHost).toBe('localhost:8080');
    for (const bad of ['*.apps.example.com', 'https://apps.example.com', 'apps.example.com/x'])
      expect(() => loadConfig({ APPS_HOST: bad })).toThrow(/^APPS_HOST/);
  });
});

describe('shutdown drain in the configuration', () => {
  it('closes at once by default; SHUTDOWN_DRAIN_MS keeps serving that long, bad values name the variable', () => {
    expect(loadConfig({}).shutdownDrainMs).toBe(0);
    expect(loadConfig({ SHUTDOWN_DRAIN_MS: '3000' }).shutdownDrainMs).toBe(3000);
    expect(() => loadConfig({ SHUTDOWN_DRAIN_MS: '-1' })).toThrow(/SHUTDOWN_DRAIN_MS/);
    expect(() => loadConfig({ SHUTDOWN_DRAIN_MS: '300001' })).toThrow(/SHUTDOWN_DRAIN_MS/);
  });
});

describe('registered SSH keys at the gateway in the configuration', () => {
  it('are off unless SSH_USER_KEYS turns them on; a value that is not true or false is refused, naming it', () => {
    expect(loadConfig({}).sshUserKeys).toBe(false);
    expect(loadConfig({ SSH_USER_KEYS: 'true' }).sshUserKeys).toBe(true);
    expect(loadConfig({ SSH_USER_KEYS: 'off' }).sshUserKeys).toBe(false);
    expect(() => loadConfig({ SSH_USER_KEYS: 'maybe' })).toThrow(/SSH_USER_KEYS/);
  });
});
