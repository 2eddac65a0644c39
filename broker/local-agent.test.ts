import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { BOOTSTRAP_KEY_ENV } from '../agent/options.js';
import { localAgentCommand } from './local-agent.js';

describe('the local agent (--with-agent)', () => {
  it('gets its bootstrap key by environment, never on the command line', () => {
    const key = 'secret-bootstrap-key-123';
    const command = localAgentCommand('http://127.0.0.1:8080', '/srv/data/agent', key, { PATH: '/usr/bin' });
    expect(command.args.join(' ')).not.toContain(key);
    expect(command.args).not.toContain('--bootstrap-key');
    expect(command.env[BOOTSTRAP_KEY_ENV]).toBe(key);
    expect(command.env.PATH).toBe('/usr/bin');
  });

  it('runs the bundled agent with node alone from the broker build, and says so when it is not built', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-local-agent-'));
    try {
      const bundle = path.join(dir, 'fleet-agent.mjs');
      expect(() => localAgentCommand('http://127.0.0.1:8080', '/srv/data/agent', 'k', {}, bundle)).toThrow(/npm run build:agent/);
      fs.writeFileSync(bundle, '');
      const command = localAgentCommand('http://127.0.0.1:8080', '/srv/data/agent', 'k', {}, bundle);
      expect(command.args).toEqual([bundle, '--broker', 'http://127.0.0.1:8080', '--state-dir', '/srv/data/agent']);
      // From source: through tsx.
      expect(localAgentCommand('http://127.0.0.1:8080', '/srv/data/agent', 'k', {}).args[0]).toMatch(/tsx/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('tells the agent that an http broker on a non-loopback address of this machine is allowed; loopback and https need nothing', () => {
    expect(localAgentCommand('http://192.168.1.5:8080', '/srv/data/agent', 'k', {}).args).toContain('--insecure-http');
    expect(localAgentCommand('http://127.0.0.1:8080', '/srv/data/agent', 'k', {}).args).not.toContain('--insecure-http');
    expect(localAgentCommand('https://broker.example.com', '/srv/data/agent', 'k', {}).args).not.toContain('--insecure-http');
  });
});
