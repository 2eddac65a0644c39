import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentConfigError, BOOTSTRAP_KEY_ENV, CONFIG_ROOT_ENV, INSECURE_HTTP_ENV, loadAgentConfig } from './options.js';

const dirs: string[] = [];
function tmp(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-config-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

describe('agent configuration', () => {
  it('takes the command line with documented defaults', () => {
    const c = loadAgentConfig({ broker: 'https://broker.example.com/', bootstrapKey: 'k' });
    expect(c).toMatchObject({
      broker: 'https://broker.example.com',
      bootstrapKey: 'k',
      exitOnReload: false,
      logLevel: 'info',
      retryMinMs: 1000,
      retryMaxMs: 60_000,
      inventoryIntervalMs: 600_000,
    });
    expect(c.stateDir).toBe(path.resolve('./agent-state'));
  });

  it('takes the metrics interval, send interval and queue bound from the file or the command line, with defaults', () => {
    expect(loadAgentConfig({ broker: 'https://b.example.com' })).toMatchObject({ metricsIntervalMs: 60_000, metricsFlushMs: 300_000, metricsQueueMax: 20_000 });
    const file = path.join(tmp(), 'agent.json');
    fs.writeFileSync(file, JSON.stringify({ broker: 'https://b.example.com', metrics_interval_ms: 10_000, metrics_flush_ms: 60_000, metrics_queue_max: 500 }));
    expect(loadAgentConfig({ config: file, metricsIntervalMs: '5000' })).toMatchObject({
      metricsIntervalMs: 5000,
      metricsFlushMs: 60_000,
      metricsQueueMax: 500,
    });
    expect(() => loadAgentConfig({ broker: 'https://b.example.com', metricsIntervalMs: '10' })).toThrow(
      /metrics_interval_ms must be a whole number between 1000/,
    );
    expect(() => loadAgentConfig({ broker: 'https://b.example.com', metricsQueueMax: '-1' })).toThrow(AgentConfigError);
  });

  it('takes the bootstrap key from a file or the environment, so it need not show in the process list', () => {
    const d = tmp();
    const keyFile = path.join(d, 'key');
    fs.writeFileSync(keyFile, 'from-key-file\n', { mode: 0o600 });
    expect(loadAgentConfig({ broker: 'https://x', bootstrapKeyFile: keyFile }, {}).bootstrapKey).toBe('from-key-file');
    expect(loadAgentConfig({ broker: 'https://x' }, { [BOOTSTRAP_KEY_ENV]: 'from-env' }).bootstrapKey).toBe('from-env');
    // The command line wins over the environment, the environment over the config file.
    expect(loadAgentConfig({ broker: 'https://x', bootstrapKeyFile: keyFile }, { [BOOTSTRAP_KEY_ENV]: 'from-env' }).bootstrapKey).toBe('from-key-file');
    const config = path.join(d, 'config.json');
    fs.writeFileSync(config, JSON.stringify({ broker: 'https://a.example', bootstrap_key_file: 'key' }));
    expect(loadAgentConfig({ config }, {}).bootstrapKey).toBe('from-key-file');
    expect(loadAgentConfig({ config }, { [BOOTSTRAP_KEY_ENV]: 'from-env' }).bootstrapKey).toBe('from-env');
    expect(loadAgentConfig({ broker: 'https://x' }, {}).bootstrapKey).toBeUndefined();
    expect(() => loadAgentConfig({ broker: 'https://x', bootstrapKeyFile: path.join(d, 'missing') }, {})).toThrow(/bootstrap key file/);
    fs.writeFileSync(path.join(d, 'empty'), '\n');
    expect(() => loadAgentConfig({ broker: 'https://x', bootstrapKeyFile: path.join(d, 'empty') }, {})).toThrow(/empty/);
    expect(() => loadAgentConfig({ broker: 'https://x', bootstrapKey: 'a', bootstrapKeyFile: keyFile }, {})).toThrow(AgentConfigError);
  });

  it('reads a JSON file, paths relative to it, with the command line winning', () => {
    const d = tmp();
    fs.writeFileSync(path.join(d, 'ca.pem'), 'x');
    const file = path.join(d, 'config.json');
    fs.writeFileSync(
      file,
      JSON.stringify({ broker: 'https://a.example', bootstrap_key: 'from-file', state_dir: 'state', ca_file: 'ca.pem', exit_on_reload: true }),
    );
    const c = loadAgentConfig({ config: file, broker: 'https://b.example' });
    expect(c).toMatchObject({
      broker: 'https://b.example',
      bootstrapKey: 'from-file',
      stateDir: path.join(d, 'state'),
      caFile: path.join(d, 'ca.pem'),
      exitOnReload: true,
    });
  });

  it('refuses what would fail later, saying what is wrong', () => {
    expect(() => loadAgentConfig({})).toThrow(/broker URL/);
    expect(() => loadAgentConfig({ broker: 'ftp://x' })).toThrow(/http/);
    expect(() => loadAgentConfig({ broker: 'not a url' })).toThrow(AgentConfigError);
    expect(() => loadAgentConfig({ broker: 'https://u:p@x' })).toThrow(/credentials/);
    expect(() => loadAgentConfig({ broker: 'https://x', caFile: '/no/such/ca.pem' })).toThrow(/CA file/);
    expect(() => loadAgentConfig({ broker: 'https://x', logLevel: 'loud' })).toThrow(/log level/);
    expect(() => loadAgentConfig({ broker: 'https://x', retryMinMs: '5000', retryMaxMs: '100' })).toThrow(/retry_max_ms/);
    const d = tmp();
    const file = path.join(d, 'c.json');
    fs.writeFileSync(file, JSON.stringify({ broker: 'https://x', brokr: 'typo' }));
    expect(() => loadAgentConfig({ config: file })).toThrow(/unknown setting "brokr"/);
    fs.writeFileSync(file, '{ not json');
    expect(() => loadAgentConfig({ config: file })).toThrow(/not valid JSON/);
  });

  it('applies configuration under / unless FLEET_AGENT_CONFIG_ROOT names an existing directory (tests, development)', () => {
    expect(loadAgentConfig({ broker: 'https://x' }, {}).configRoot).toBe('/');
    const d = tmp();
    expect(loadAgentConfig({ broker: 'https://x' }, { [CONFIG_ROOT_ENV]: d }).configRoot).toBe(d);
    expect(() => loadAgentConfig({ broker: 'https://x' }, { [CONFIG_ROOT_ENV]: 'relative/dir' })).toThrow(/absolute path/);
    expect(() => loadAgentConfig({ broker: 'https://x' }, { [CONFIG_ROOT_ENV]: path.join(d, 'missing') })).toThrow(/not an existing directory/);
  });

  it('refuses a plain http broker that is not this machine unless --insecure-http (or FLEET_INSECURE_HTTP=1, insecure_http) says so', () => {
    for (const broker of [
      'http://broker.example.com',
      'http://10.0.0.5:8080',
      'http://[2001:db8::1]',
      'http://127.0.0.1.nip.io',
      'http://localhost.example.com',
    ]) {
      expect(() => loadAgentConfig({ broker }, {})).toThrow(AgentConfigError);
      expect(() => loadAgentConfig({ broker }, {})).toThrow(/--insecure-http/);
    }
    // The broker's own --with-agent and development: loopback stays allowed, and is not "insecure".
    for (const broker of ['http://127.0.0.1:3000', 'http://localhost:3000', 'http://[::1]:3000', 'http://127.0.0.2']) {
      expect(loadAgentConfig({ broker }, {})).toMatchObject({ insecureHttp: false });
    }
    expect(loadAgentConfig({ broker: 'http://broker.example.com', insecureHttp: true }, {})).toMatchObject({ insecureHttp: true });
    expect(loadAgentConfig({ broker: 'http://broker.example.com' }, { [INSECURE_HTTP_ENV]: '1' })).toMatchObject({ insecureHttp: true });
    expect(() => loadAgentConfig({ broker: 'http://broker.example.com' }, { [INSECURE_HTTP_ENV]: '0' })).toThrow(/--insecure-http/);
    expect(() => loadAgentConfig({ broker: 'http://broker.example.com' }, { [INSECURE_HTTP_ENV]: 'yes please' })).toThrow(/must be 1 or 0/);
    const file = path.join(tmp(), 'c.json');
    fs.writeFileSync(file, JSON.stringify({ broker: 'http://broker.example.com', insecure_http: true }));
    expect(loadAgentConfig({ config: file }, {})).toMatchObject({ insecureHttp: true });
    fs.writeFileSync(file, JSON.stringify({ broker: 'http://broker.example.com', insecure_http: 'yes' }));
    expect(() => loadAgentConfig({ config: file }, {})).toThrow(/insecure_http must be true or false/);
    expect(loadAgentConfig({ broker: 'https://broker.example.com', insecureHttp: true }, {})).toMatchObject({ insecureHttp: false });
  });
});
