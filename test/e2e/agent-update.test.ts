/**
 * Agent updates from the broker, end to end with the bundled agent: two versions of the same build
 * (1.0.0 runs from an unpacked tree, the broker publishes 1.1.0), this test acting as the service
 * manager (it starts the agent again whenever it exits, as systemd's Restart=always does). The agent
 * refuses a downgrade, updates itself over its own connection, restarts into the new version (the
 * broker sees its version), rolls back from a version that crashes at start and from one that never
 * connects (the launcher's watchdog), and the failure reaches the broker as an agent_internal report.
 * Nothing is installed onto this machine: everything lives in a temporary directory.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAgent } from '../../agent/packaging/build.js';
import { eventually } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

interface LogLine {
  msg: string;
  [k: string]: unknown;
}

/** A tiny service manager: runs the agent, starts it again after every exit but 78, keeps its logs. */
class Service {
  readonly logs: LogLine[] = [];
  readonly exits: (number | null)[] = [];
  starts = 0;
  private child?: ChildProcess;
  private stopped = false;

  constructor(
    private readonly program: string,
    public args: string[],
  ) {}

  start(): void {
    this.stopped = false;
    this.starts += 1;
    const child = spawn(process.execPath, [this.program, ...this.args], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.child = child;
    let buffered = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        try {
          this.logs.push(JSON.parse(line) as LogLine);
        } catch {
          this.logs.push({ msg: line });
        }
      }
    });
    child.on('exit', (code) => {
      this.exits.push(code);
      if (!this.stopped && code !== 78) setTimeout(() => !this.stopped && this.start(), 100);
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  }

  waitLog(match: (l: LogLine) => boolean, what: string, from = 0): Promise<LogLine> {
    return eventually(() => this.logs.slice(from).find(match), 60_000, what);
  }
}

let work: string;
let served: string;
let stateDir: string;
let t: TestBroker;
let service: Service;
let device: string;

/** Publishes a build on the broker (its artifacts directory) and lets it announce it. */
async function publish(bundle: string, version: string): Promise<void> {
  fs.copyFileSync(bundle, path.join(served, 'fleet-agent.mjs.new'));
  fs.renameSync(path.join(served, 'fleet-agent.mjs.new'), path.join(served, 'fleet-agent.mjs'));
  fs.writeFileSync(path.join(served, 'package.json'), JSON.stringify({ name: 'fleet-agent', version }));
  await t.broker.services.agentUpdates.checkPublished();
}

const connectedVersion = () => t.broker.services.agents.connectionInfo(device)?.version;
const updateState = () => JSON.parse(fs.readFileSync(path.join(stateDir, 'agent', 'update.json'), 'utf8')) as Record<string, unknown>;
const versionsOnDisk = () => fs.readdirSync(path.join(stateDir, 'agent', 'versions')).sort();

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-update-'));
  served = path.join(work, 'served');
  stateDir = path.join(work, 'state');
  fs.mkdirSync(served);
  await buildAgent(path.join(work, 'old'), { version: '1.0.0', packages: false });
  await buildAgent(path.join(work, 'new'), { version: '1.1.0', packages: false });
  // A version that dies as it starts, and one that runs but never reaches the broker.
  fs.writeFileSync(path.join(work, 'crash.mjs'), "process.stderr.write('broken build\\n');\nprocess.exit(3);\n");
  fs.writeFileSync(path.join(work, 'hang.mjs'), 'setInterval(() => {}, 1000);\n');
  t = await startTestBroker({ database: 'sqlite', env: { AGENT_ARTIFACTS_DIR: served } });
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  expect(created.status).toBe(200);
  const keyFile = path.join(work, 'bootstrap-key');
  fs.writeFileSync(keyFile, `${Object.keys(created.body as object)[0]}\n`, { mode: 0o600 });
  service = new Service(path.join(work, 'old', 'fleet-agent.mjs'), [
    '--broker',
    t.url,
    '--bootstrap-key-file',
    keyFile,
    '--state-dir',
    stateDir,
    '--exit-on-reload',
    '--update-deadline-ms',
    '15000',
    '--retry-min-ms',
    '100',
    '--retry-max-ms',
    '500',
  ]);
});

afterAll(async () => {
  await service?.stop();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('agent updates from the broker', () => {
  it('runs 1.0.0 from an unpacked tree; nothing published, nothing installed', async () => {
    service.start();
    device = await eventually(() => t.broker.services.agents.connectedDevices()[0], 30_000, 'the agent connected');
    expect(connectedVersion()).toBe('1.0.0');
    expect(fs.existsSync(path.join(stateDir, 'agent', 'versions'))).toBe(false);
  });

  it('refuses a downgrade the broker publishes', async () => {
    const from = service.logs.length;
    await publish(path.join(work, 'new', 'fleet-agent.mjs'), '0.9.0');
    await service.waitLog(
      (l) => l.msg === 'agent update not installed: a downgrade (auto_update_downgrade is off)' && l.version === '0.9.0',
      'downgrade refused',
      from,
    );
    expect(fs.existsSync(path.join(stateDir, 'agent', 'versions'))).toBe(false);
    expect(service.starts).toBe(1);
    expect(connectedVersion()).toBe('1.0.0');
  });

  it('updates to 1.1.0 over its connection, restarts into it, and the broker sees the new version', async () => {
    await publish(path.join(work, 'new', 'fleet-agent.mjs'), '1.1.0');
    await eventually(() => connectedVersion() === '1.1.0', 60_000, 'the agent connected as 1.1.0');
    expect(service.exits[0]).toBe(0);
    expect(service.starts).toBe(2);
    expect(versionsOnDisk()).toEqual(['1.1.0']);
    await eventually(() => updateState().pending === undefined, 20_000, 'the switch confirmed');
    expect(updateState()).toMatchObject({ current: '1.1.0', package_version: '1.0.0' });
    expect(fs.readlinkSync(path.join(stateDir, 'agent', 'versions', '1.1.0', 'node_modules'))).toBe(path.join(work, 'old', 'node_modules'));
    const inventory = await eventually(async () => {
      const r = await t.api('GET', `/api/v2/inventory/${device}`, { token: t.adminToken });
      return r.status === 200 && JSON.stringify(r.body).includes('"agent_version":"1.1.0"') ? r.body : undefined;
    });
    expect(inventory).toBeDefined();
  });

  it('rolls back from a version that crashes at start, reports it, and does not take it again', async () => {
    const starts = service.starts;
    await publish(path.join(work, 'crash.mjs'), '1.2.0');
    const reports = await eventually(
      async () => {
        const r = await t.api('GET', `/api/v2/reportlist?node_id=${device}&bundle=agent_internal&severity=ERR`, { token: t.adminToken });
        const text = JSON.stringify(r.body);
        return text.includes('Agent update to 1.2.0 failed') ? text : undefined;
      },
      60_000,
      'the failure reported',
    );
    expect(reports).toContain('rolled back to 1.1.0');
    expect(connectedVersion()).toBe('1.1.0');
    // Exited for the update, then twice with the broken build's code, then back on 1.1.0.
    expect(service.exits.slice(-3)).toEqual([0, 3, 3]);
    expect(service.starts).toBe(starts + 3);
    expect(updateState()).toMatchObject({ current: '1.1.0', refused: ['1.2.0'], failed: { version: '1.2.0', rolled_back_to: '1.1.0' } });
    // Announced again on the new connection: refused, not installed a second time.
    await service.waitLog((l) => l.msg === 'agent update not installed: this version failed here before' && l.version === '1.2.0', 'failed version refused');
    expect(service.starts).toBe(starts + 3);
  });

  it('rolls back from a version that runs but is not welcomed within the deadline', async () => {
    const starts = service.starts;
    await publish(path.join(work, 'hang.mjs'), '1.3.0');
    await service.waitLog((l) => l.msg === 'the updated agent did not connect in time: rolled back, restarting' && l.version === '1.3.0', 'watchdog');
    await eventually(() => connectedVersion() === '1.1.0' && service.starts === starts + 2, 30_000, 'back on 1.1.0');
    expect(updateState()).toMatchObject({ current: '1.1.0', failed: { version: '1.3.0' } });
    expect(updateState().refused).toEqual(['1.2.0', '1.3.0']);
    // Bounded disk: the current version and at most the previous one (here the failed one is gone).
    expect(versionsOnDisk().length).toBeLessThanOrEqual(2);
    expect(versionsOnDisk()).toContain('1.1.0');
  });
});
