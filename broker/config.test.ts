import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.js';

describe('connection limits in the configuration', () => {
  it('defaults: 1024 agent handshakes, 32 per address, 256 connections per address', () => {
    const c = loadConfig({});
    expect([c.agentHandshakesMax, c.agentHandshakesPerAddress, c.maxConnectionsPerAddress]).toEqual([1024, 32, 256]);
  });

  it('has no connection cap per address behind a proxy unless one is set', () => {
    expect(loadConfig({ TRUST_PROXY: 'true' }).maxConnectionsPerAddress).toBe(0);
    expect(loadConfig({ TRUST_PROXY: 'true', MAX_CONNECTIONS_PER_ADDRESS: '50' }).maxConnectionsPerAddress).toBe(50);
  });

  it('refuses a per-address handshake limit above the total, and bad numbers, naming the variable', () => {
    expect(() => loadConfig({ AGENT_HANDSHAKES_MAX: '8', AGENT_HANDSHAKES_PER_ADDRESS: '9' })).toThrow(ConfigError);
    expect(() => loadConfig({ AGENT_HANDSHAKES_PER_ADDRESS: '0' })).toThrow(/AGENT_HANDSHAKES_PER_ADDRESS/);
    expect(() => loadConfig({ MAX_CONNECTIONS_PER_ADDRESS: '-1' })).toThrow(/MAX_CONNECTIONS_PER_ADDRESS/);
  });
});

describe('recording retention in the configuration', () => {
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

describe('shutdown drain in the configuration', () => {
  it('closes at once by default; SHUTDOWN_DRAIN_MS keeps serving that long, bad values name the variable', () => {
    expect(loadConfig({}).shutdownDrainMs).toBe(0);
    expect(loadConfig({ SHUTDOWN_DRAIN_MS: '3000' }).shutdownDrainMs).toBe(3000);
    expect(() => loadConfig({ SHUTDOWN_DRAIN_MS: '-1' })).toThrow(/SHUTDOWN_DRAIN_MS/);
    expect(() => loadConfig({ SHUTDOWN_DRAIN_MS: '300001' })).toThrow(/SHUTDOWN_DRAIN_MS/);
  });
});
