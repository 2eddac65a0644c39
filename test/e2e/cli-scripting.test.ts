/**
 * The `fleet` CLI in scripts: filters and output formats, id prefixes, one-shot console commands,
 * recordings, shell completion and recursive copies, driven as users run it (bin/fleet.js in a
 * child process) against a real broker and a real agent process.
 */
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const FLEET = path.join(ROOT, 'bin', 'fleet.js');

let t: TestBroker;
let agent: TestAgent;
let device: string;
let work: string;
let env: Record<string, string>;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function fleet(args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Run> {
  const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
  const child = spawn(process.execPath, [FLEET, ...args], { cwd: work, env: { ...rest, XDG_CONFIG_HOME: path.join(work, 'config'), ...env, ...options.env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(options.input ?? '');
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

const hex = (prefix: string) => (prefix + crypto.randomBytes(32).toString('hex')).slice(0, 64);

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-scripts-'));
  env = { FLEET_URL: t.url, FLEET_TOKEN: t.adminToken };
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(t);
});

afterAll(async () => {
  await agent?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('fleet devices in scripts', () => {
  it('filters by name, tag, group and status; -o json|wide|table; short ids keep a table within 80 columns', async () => {
    const group = await t.addGroup({ id: `grp-${crypto.randomBytes(3).toString('hex')}`, title: 'lab' });
    const inLab = await t.addDevice({ parent: group, tags: ['sensor', 'north'], name: 'lab-sensor-1' });
    const other = await t.addDevice({ tags: ['sensor'], name: 'yard-sensor-2' });

    const json = await fleet(['devices', '-o', 'json', '--tag', 'sensor']);
    expect(json.code, json.stderr).toBe(0);
    expect(
      JSON.parse(json.stdout)
        .map((d: any) => d.id)
        .sort(),
    ).toEqual([inLab, other].sort());
    // --json stays the same as -o json.
    const alias = await fleet(['devices', '--json', '--tag', 'sensor', '--tag', 'north']);
    expect(JSON.parse(alias.stdout).map((d: any) => d.id)).toEqual([inLab]);
    const byGroup = await fleet(['devices', '-o', 'json', '--group', 'lab']);
    expect(JSON.parse(byGroup.stdout).map((d: any) => d.id)).toEqual([inLab]);
    const byName = await fleet(['devices', '-o', 'json', '--name', 'YARD']);
    expect(JSON.parse(byName.stdout).map((d: any) => d.id)).toEqual([other]);
    const online = await fleet(['devices', '-o', 'json', '--online']);
    expect(JSON.parse(online.stdout).map((d: any) => d.id)).toEqual([device]);
    const offline = await fleet(['devices', '-o', 'json', '--offline']);
    expect(JSON.parse(offline.stdout).map((d: any) => d.id)).toEqual(expect.arrayContaining([inLab, other]));
    expect(JSON.parse(offline.stdout).map((d: any) => d.id)).not.toContain(device);

    const table = await fleet(['devices']);
    expect(table.code).toBe(0);
    for (const line of table.stdout.trimEnd().split('\n')) expect(line.length).toBeLessThanOrEqual(80);
    expect(table.stdout).not.toContain(device);
    expect(table.stdout).toMatch(new RegExp(`^${device.slice(0, 8)}[0-9a-f]*\\s`, 'm'));
    const wide = await fleet(['devices', '-o', 'wide']);
    expect(wide.stdout).toContain(device);
    const bad = await fleet(['devices', '-o', 'yaml']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^fleet: -o yaml: the output is table, wide or json\./);
  });

  it('names a device by a unique id prefix of 4 or more; an ambiguous one lists the matching short ids', async () => {
    const r = await fleet(['reload', device.slice(0, 4)]);
    expect(r.stderr, r.stderr).toContain('reloaded');
    expect(r.code).toBe(0);
    await agent.waitConnected(t);

    const stem = crypto.randomBytes(2).toString('hex').replace(/^./, 'f');
    const a = await t.addDevice({ id: hex(`${stem}0a`) });
    const b = await t.addDevice({ id: hex(`${stem}0b`) });
    const ambiguous = await fleet(['reload', stem]);
    expect(ambiguous.code).toBe(1);
    expect(ambiguous.stderr.trim().split('\n')).toHaveLength(1);
    expect(ambiguous.stderr).toContain(`"${stem}" is the start of 2 device ids (${a.slice(0, 8)}, ${b.slice(0, 8)})`);
    const tooShort = await fleet(['reload', device.slice(0, 3)]);
    expect(tooShort.code).toBe(1);
    expect(tooShort.stderr).toMatch(/at least 4 characters/);
    const help = await fleet(['console', '--help']);
    expect(help.stdout.replace(/\s+/g, ' ')).toMatch(/unique prefix of its id \(4 or more characters\)/);
  });
});

describe('fleet completion', () => {
  it('prints a bash script that completes the commands and the options of each, from the program itself', async () => {
    const r = await fleet(['completion', 'bash']);
    expect(r.code).toBe(0);
    const complete = (line: string[]) => {
      const script = `${r.stdout}\nCOMP_WORDS=(${line.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${line.length - 1}; _fleet_complete; echo "\${COMPREPLY[*]}"`;
      return spawnSync('bash', ['--norc', '-c', script], { encoding: 'utf8' }).stdout.trim();
    };
    expect(complete(['fleet', 'de'])).toBe('devices');
    expect(complete(['fleet', 'co']).split(' ').sort()).toEqual(['completion', 'connect', 'console']);
    expect(complete(['fleet', 'devices', '--o']).split(' ').sort()).toEqual(['--offline', '--online', '--output']);
    for (const shell of ['zsh', 'fish']) {
      const s = await fleet(['completion', shell]);
      expect(s.code).toBe(0);
      expect(s.stdout).toContain('devices');
      expect(s.stdout).toContain('offline');
    }
    const unknown = await fleet(['completion', 'tcsh']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^fleet: No completion for "tcsh": give bash, zsh, fish\./);
  });
});
