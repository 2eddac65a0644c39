/**
 * End to end: configuration from the API to files on a real agent. A template uploaded to the file
 * store, a custom device attribute and a file parameter are committed as a file_distribution with
 * `is_template`; the real agent process fetches the template over a file channel, renders it under
 * its configuration root (a temporary directory, never this machine's `/`), and answers
 * `config_applied`, which shows in the tree (device_commit_sha, config_propagated) and in the Logs
 * (GET /reportlist). A device offline during the commit applies it when it comes back.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let agent: TestAgent | undefined;
let offline: TestAgent | undefined;
let id: string;
const scratch: string[] = [];

const api = (method: string, p: string, body?: unknown) => t.api(method, `/api/v2${p}`, { token: t.adminToken, body });

function form(folder: string, name: string, content: string): FormData {
  const f = new FormData();
  f.append('path', folder);
  f.append('file', new Blob([content]), name);
  return f;
}

function tempDir(prefix: string): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  scratch.push(d);
  return d;
}

/** The device's node in GET /grouptree (devices sit under their group). */
async function treeNode(deviceId: string): Promise<{ device_commit_sha: string; config_propagated: boolean }> {
  const tree = (await api('GET', '/grouptree')).body.tree;
  const walk = (n: { node_id: string; nodes?: unknown[] }): any => {
    if (n.node_id === deviceId) return n;
    for (const c of (n.nodes ?? []) as { node_id: string }[]) {
      const found = walk(c);
      if (found) return found;
    }
    return undefined;
  };
  return walk(tree);
}

function fileDistribution(destination: string) {
  return {
    files: [
      {
        label: 'motd',
        templates: [{ source: '/templates/motd.tpl', destination, is_template: true }],
        parameters: [{ key: 'port', value: '8443' }],
      },
    ],
  };
}

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'site', tags: ['site'] });
  const key = await api('POST', '/bootstrapkey', { group_id: 'site', auto_accept: true });
  expect(key.status).toBe(200);
  const bootstrapKey = Object.keys(key.body)[0];
  expect(
    (await t.api('POST', '/api/v2/file', { token: t.adminToken, body: form('/templates/', 'motd.tpl', 'site={{site}}\nport={{port}}\nkeep={{unknown}}\n') }))
      .status,
  ).toBe(200);
  agent = startAgent({ broker: t.url, bootstrapKey });
  id = await agent.waitConnected(t, 60_000);
  // The second device: enrolled and connected once, then stopped before the commit.
  offline = startAgent({ broker: t.url, bootstrapKey, stateDir: tempDir('fleet-agent-offline-'), configRoot: tempDir('fleet-agent-offline-root-') });
  await offline.waitConnected(t, 60_000);
});
afterAll(async () => {
  await agent?.close();
  await offline?.close();
  await t?.close();
  for (const d of scratch) fs.rmSync(d, { recursive: true, force: true });
});

describe('configuration applied by a real agent', () => {
  it('renders a committed template with a device attribute and a parameter under the agent’s root, and reports it', async () => {
    const offlineId = await offline!.deviceId();
    const offlineState = offline!.stateDir;
    const offlineRoot = offline!.configRoot;
    await offline!.close();
    await eventually(() => !t.broker.services.agents.isConnected(offlineId), 20_000, 'the second agent to disconnect');

    expect((await api('PATCH', `/deviceattribute/${id}`, { custom: { site: 'oslo-7' } })).status).toBe(200);
    expect((await api('PATCH', `/deviceattribute/${offlineId}`, { custom: { site: 'bergen-2' } })).status).toBe(200);
    const committed = await api('POST', '/commit', {
      action: 'commit',
      message: 'motd from a template',
      changes: [{ node_id: 'site', formtype: 'file_distribution', extend: false, config: fileDistribution('/etc/motd') }],
    });
    expect(committed.status).toBe(200);
    const sha: string = committed.body.sha;

    const written = path.join(agent!.configRoot, 'etc/motd');
    const content = await eventually(() => fs.existsSync(written) && fs.readFileSync(written, 'utf8'), 60_000, 'the rendered file');
    expect(content).toBe('site=oslo-7\nport=8443\nkeep={{unknown}}\n');

    // config_applied: the tree shows the commit the device runs, and that it is the current one
    const node = await eventually(
      async () => {
        const n = await treeNode(id);
        return n?.config_propagated ? n : undefined;
      },
      30_000,
      'config_propagated in the tree',
    );
    expect(node.device_commit_sha).toBe(sha);

    // the run's report in the Logs
    const logs = await eventually(
      async () => {
        const r = await api('GET', `/reportlist?node_id=${id}&bundle=file_distribution`);
        return r.body.total > 0 ? r.body : undefined;
      },
      30_000,
      'the file_distribution report',
    );
    expect(logs.items[0]).toMatchObject({ node_id: id, bundle: 'file_distribution', commit_id: sha, sev: 'INFO' });
    expect(logs.items.map((i: { text: string }) => i.text)).toContain('[motd] Successfully rendered template file /templates/motd.tpl to /etc/motd');

    // a device offline during the commit applies it when it comes back
    expect((await treeNode(offlineId)).config_propagated).toBe(false);
    expect(fs.existsSync(path.join(offlineRoot, 'etc/motd'))).toBe(false);
    offline = startAgent({ broker: t.url, stateDir: offlineState, configRoot: offlineRoot });
    await offline.waitConnected(t, 60_000);
    const late = path.join(offlineRoot, 'etc/motd');
    expect(await eventually(() => fs.existsSync(late) && fs.readFileSync(late, 'utf8'), 60_000, 'the file on the returning device')).toBe(
      'site=bergen-2\nport=8443\nkeep={{unknown}}\n',
    );
    const back = await eventually(
      async () => {
        const n = await treeNode(offlineId);
        return n?.config_propagated ? n : undefined;
      },
      30_000,
      'the returning device propagated',
    );
    expect(back.device_commit_sha).toBe(sha);
  });

  it('nothing is written outside the agent’s root', () => {
    // the destination is the device's /etc/motd; the agent ran with a scratch root, so this machine's
    // /etc/motd is not the rendered one
    const real = fs.existsSync('/etc/motd') ? fs.readFileSync('/etc/motd', 'utf8') : '';
    expect(real).not.toContain('site=oslo-7');
  });
});
