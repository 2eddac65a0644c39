/**
 * The agent's plain-http policy as a real agent process applies it: a broker on another machine
 * over http:// is refused before anything is sent (the bootstrap key included), and the explicit
 * --insecure-http is said as a warning at every start, so that it never goes unnoticed in the logs.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startAgent, type TestAgent } from '../support/agent.js';

// TEST-NET-1 (RFC 5737): not this machine, and never answers.
const ELSEWHERE = 'http://192.0.2.1:9';

const agents: TestAgent[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const a of agents.splice(0)) await a.close();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

describe('plain http to the broker', () => {
  it('is refused to another machine, and allowed by --insecure-http with a warning at every start', async () => {
    const refused = startAgent({ broker: ELSEWHERE, bootstrapKey: 'a-bootstrap-key' });
    agents.push(refused);
    expect(await refused.exited(60_000)).not.toBe(0);
    expect([...refused.logs.map((l) => l.msg), ...refused.output].join('\n')).toContain('--insecure-http');

    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-insecure-'));
    dirs.push(stateDir);
    const insecure = () => {
      const a = startAgent({ broker: ELSEWHERE, bootstrapKey: 'a-bootstrap-key', args: ['--insecure-http'], stateDir });
      agents.push(a);
      return a;
    };
    const warned = (l: { level: number; msg: string }) => l.level === 40 && l.msg.startsWith('INSECURE: plain http to the broker');
    const first = insecure();
    expect(await first.waitForLog(warned, 60_000)).toMatchObject({ broker: 'http://192.0.2.1:9' });
    await first.close();
    // started again on the same state: said again
    const again = insecure();
    await again.waitForLog(warned, 60_000);
  });
});
