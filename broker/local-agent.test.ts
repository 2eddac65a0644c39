import { describe, expect, it } from 'vitest';
import { BOOTSTRAP_KEY_ENV } from '../agent/config.js';
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
});
