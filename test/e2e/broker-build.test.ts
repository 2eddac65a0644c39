/**
 * The production broker: `npm run build:broker` into a temporary directory laid out like a checkout
 * (<tmp>/dist/broker, the packages in <tmp>/node_modules), started with `node <tmp>/dist/broker/main.js`
 * on a free port with a temporary DATA_DIR: the API answers, the web console and the API sandbox are
 * served, the agent installer is found beside the build, a user signs in, and it is one node process.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const TSX = path.join(ROOT, 'node_modules', '.bin', 'tsx');
const ADMIN = { email: 'prod-admin@example.com', password: 'prod-password-1' };

let work: string;
let broker: ChildProcess;
let url: string;
let output = '';

/** Children of `pid`, from /proc. */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-broker-build-'));
  const out = path.join(work, 'dist', 'broker');
  const built = spawnSync(TSX, [path.join(ROOT, 'broker', 'packaging', 'build.ts'), '--out', out], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  expect(built.status, built.stderr).toBe(0);
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(work, 'node_modules'));
  // What `npm run build:agent` leaves beside the broker build; only the installer is needed here.
  fs.mkdirSync(path.join(work, 'dist', 'agent'));
  fs.writeFileSync(path.join(work, 'dist', 'agent', 'install.sh'), '#!/bin/sh\n# installer test marker\n');

  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATA_DIR: path.join(work, 'data'),
    PORT: '0',
    HOST: '127.0.0.1',
    ADMIN_EMAIL: ADMIN.email,
    ADMIN_PASSWORD: ADMIN.password,
    LOG_LEVEL: 'warn',
  };
  // Started from another directory: nothing may depend on the working directory.
  broker = spawn(process.execPath, [path.join(out, 'main.js')], { cwd: os.tmpdir(), env, stdio: ['ignore', 'pipe', 'pipe'] });
  broker.stdout?.on('data', (c: Buffer) => (output += c.toString()));
  broker.stderr?.on('data', (c: Buffer) => (output += c.toString()));
  url = await new Promise<string>((resolve, reject) => {
    const check = setInterval(() => {
      const m = /Fleet broker on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (m) {
        clearInterval(check);
        resolve(m[1]);
      }
    }, 100);
    broker.once('exit', (code) => {
      clearInterval(check);
      reject(new Error(`the built broker exited with ${code}: ${output}`));
    });
  });
});

afterAll(async () => {
  if (broker && broker.exitCode === null) {
    const exited = new Promise((r) => broker.once('exit', r));
    broker.kill('SIGTERM');
    await exited;
  }
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('the broker build (node dist/broker/main.js)', () => {
  it('answers the API and serves the web console and the API sandbox', async () => {
    const openapi = await fetch(`${url}/api/v2/openapi.json`);
    expect(openapi.status).toBe(200);
    expect(((await openapi.json()) as { openapi: string }).openapi).toMatch(/^3\./);
    // Not signed in: the API's own error shape, from the bundled router.
    const me = await fetch(`${url}/api/v2/profile`);
    expect(me.status).toBe(401);

    const index = await fetch(`${url}/`);
    expect(index.status).toBe(200);
    const html = await index.text();
    expect(html).toContain('<title>Fleet console</title>');
    const script = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    expect(script).toBeDefined();
    const asset = await fetch(`${url}${script}`);
    expect(asset.status).toBe(200);
    // A console route loads the app too.
    expect(await (await fetch(`${url}/devices`)).text()).toContain('<title>Fleet console</title>');

    const sandbox = await fetch(`${url}/api/sandbox/assets/swagger-ui-bundle.js`);
    expect(sandbox.status).toBe(200);
    const installer = await fetch(`${url}/install.sh`);
    expect(installer.status).toBe(200);
    expect(await installer.text()).toContain('installer test marker');
  });

  it('signs a user in, and refuses a wrong password', async () => {
    const login = await fetch(`${url}/api/v2/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(ADMIN) });
    expect(login.status).toBe(200);
    const { token } = (await login.json()) as { token: string };
    const me = await fetch(`${url}/api/v2/profile`, { headers: { authorization: `Bearer ${token}` } });
    expect(me.status).toBe(200);
    const wrong = await fetch(`${url}/api/v2/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...ADMIN, password: 'not-the-password' }),
    });
    expect(wrong.status).toBe(401);
  });

  it('is one node process, without tsx', () => {
    const pid = broker.pid as number;
    const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    expect(cmdline).toEqual([process.execPath, path.join(work, 'dist', 'broker', 'main.js')]);
    expect(fs.readFileSync(`/proc/${pid}/environ`, 'utf8')).not.toMatch(/NODE_OPTIONS|tsx/);
    expect(childrenOf(pid)).toEqual([]);
    expect(output).not.toMatch(/error/i);
  });
});
