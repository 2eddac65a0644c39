/**
 * A console on a real agent is recorded, and `fleet play` replays the recording (bin/fleet.js in a
 * child process, as users run it).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connectRemote } from '../support/remote-ws.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const FLEET = path.join(ROOT, 'bin', 'fleet.js');

let t: TestBroker;
let agent: TestAgent;
let device: string;

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(t);
});

afterAll(async () => {
  await agent?.close();
  await t?.close();
});

function fleet(args: string[], token: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
  const child = spawn(process.execPath, [FLEET, ...args], {
    env: { ...rest, FLEET_URL: t.url, FLEET_TOKEN: token, XDG_CONFIG_HOME: path.join(t.dataDir, 'nowhere') },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end();
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

describe('recorded consoles', () => {
  it('records a console on a real agent and `fleet play --no-wait` shows its output, escaped when not to a terminal', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device, cols: 100, rows: 30 }, t.adminToken);
    await s.ready;
    s.ws.send(Buffer.from('printf "\\033[1mplayed-%s\\033[0m\\n" "$((6*7))"\n'));
    await s.output('played-');
    s.ws.send(Buffer.from('exit\n'));
    await s.closed;

    const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console&result=allowed`, { token: t.adminToken });
    const start = (audit.body.items as any[]).find((e) => e.event === 'remote.console.start');
    const sessionId = start.options.recording as string;
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/);

    await expect.poll(async () => (await fleet(['play', '--no-wait', sessionId], t.adminToken)).stdout).toContain('played-');
    const played = await fleet(['play', '--no-wait', sessionId], t.adminToken);
    expect(played.code).toBe(0);
    // The recorded bold on/off are shown as text in a pipe, never passed on raw.
    expect(played.stdout).toContain('\\x1b[1mplayed-42\\x1b[0m');
    expect(played.stdout).not.toContain('\x1b');
    const raw = await fleet(['play', '--no-wait', '--raw', sessionId], t.adminToken);
    expect(raw.stdout).toContain('\x1b[1mplayed-42\x1b[0m');

    // Replaying is for the console's owner and remote-access:manage on its device.
    const without = await fleet(['play', '--no-wait', sessionId], await t.tokenWith([{ permission: 'device:read' }]));
    expect(without.code).toBe(1);
    expect(without.stdout).toBe('');
  });

  it('fails closed on a real agent: a role requiring recording gets no console while recordings cannot be written', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect' }]);
    const role = await t.api('GET', `/api/v2/role/${user.roleId}`, { token: t.adminToken });
    const put = await t.api('PUT', `/api/v2/role/${user.roleId}`, { token: t.adminToken, body: { ...role.body, recording: 'required' } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const recordings = path.join(t.dataDir, 'recordings');
    // The recordings folder replaced by a file: nothing can be created there, whoever the broker runs as.
    const moved = `${recordings}.kept`;
    const existed = fs.existsSync(recordings);
    if (existed) fs.renameSync(recordings, moved);
    fs.writeFileSync(recordings, 'not a folder');
    try {
      const refused = connectRemote(t.url, 'console', { device_id: device }, user.token);
      expect((await refused.closed).code).toBe(4503);
      expect(refused.frames[0]).toMatchObject({ type: 'error', code: 503, error: 'recording_unavailable' });
      const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console&result=denied`, { token: t.adminToken });
      const entry = (audit.body.items as any[]).find((e) => String(e.reason ?? '').includes('recording is required'));
      expect(entry, JSON.stringify(audit.body.items)).toBeDefined();
    } finally {
      fs.rmSync(recordings, { force: true });
      if (existed) fs.renameSync(moved, recordings);
    }
    // With the folder back, the same user gets a recorded console on the agent.
    const s = connectRemote(t.url, 'console', { device_id: device }, user.token);
    await s.ready;
    s.ws.send(Buffer.from('echo back-$((40+2))\n'));
    await s.output('back-42');
    s.ws.send(Buffer.from('exit\n'));
    await s.closed;
  });
});
