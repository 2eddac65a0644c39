/**
 * Configuration management at scale (`npm run bench -- config`, or `… config propagation` /
 * `… config render`). Timings are printed with their targets, never asserted.
 *
 * - propagation: N simulated agents connected to an in-process broker, each speaking the real agent
 *   protocol (an enrolled EC key, the signed challenge, the multiplexed connection). A commit of a
 *   file_distribution naming one small file of the file store goes to all of them; each agent, on
 *   `config`, asks for the file (`file_request`), reads it from the `file` channel the broker opens
 *   (asking again when the broker answers `file_refused` because too many transfers run) and answers
 *   `config_applied`. Measured: from the commit request to the last agent's `config_applied`
 *   recorded by the broker, for N = 100 and 1,000 (target ≤ 5 s at 1,000).
 * - render: the configuration of 1k and 10k devices in a 5-level tree (root and four levels of
 *   groups) with 100 tags carrying configuration: a commit at root makes every device's rendered
 *   configuration change, and the broker renders, records and digests them all (commit → settled);
 *   also a pass that renders every device and finds nothing changed (best of 3). Per-device cost and the
 *   10k/1k ratio of the totals (target ≤ 12 for 10× the devices).
 */
import crypto from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Insertable } from 'kysely';
import type { DevicesTable, NodesTable } from '../broker/db/schema.js';
import { deviceIdOf, publicKeyPem } from '../shared/device-key.js';
import { Mux, type Channel } from '../shared/mux.js';
import { connectDevice, type FakeConnection } from '../test/support/agent.js';
import { approvedDeviceRow, startTestBroker, type TestBroker } from '../test/support/broker.js';
import { FROM_BROKER } from '../shared/wire.js';

type Log = (line: string) => void;

const TARGET_PROPAGATION_MS = 5000;
const TARGET_RENDER_RATIO = 12;

function form(folder: string, name: string, content: string): FormData {
  const f = new FormData();
  f.append('path', folder);
  f.append('file', new Blob([content]), name);
  return f;
}

async function commit(t: TestBroker, message: string, changes: unknown[]): Promise<string> {
  const r = await t.api('POST', '/api/v2/commit', { token: t.adminToken, body: { action: 'commit', message, changes } });
  if (r.status !== 200) throw new Error(`commit refused: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.sha as string;
}

// ---- simulated agents ---------------------------------------------------------------------------

interface SimAgent {
  id: string;
  conn: FakeConnection;
  /** The last commit this agent applied. */
  applied: string;
}

/** Devices approved straight in the store, each with a real key pair the broker checks on connect. */
async function enrolKeys(
  t: TestBroker,
  count: number,
  parent: string,
  start: number,
): Promise<{ id: string; privateKey: crypto.KeyObject; publicKeyPem: string }[]> {
  const now = new Date().toISOString();
  const out: { id: string; privateKey: crypto.KeyObject; publicKeyPem: string }[] = [];
  for (let i = 0; i < count; i++) {
    const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    out.push({ id: deviceIdOf(publicKey), privateKey, publicKeyPem: publicKeyPem(publicKey) });
  }
  const db = t.broker.services.store.db;
  for (let i = 0; i < out.length; i += 500) {
    const slice = out.slice(i, i + 500);
    await db.transaction().execute(async (trx) => {
      await trx
        .insertInto('devices')
        .values(slice.map((d, j) => ({ ...approvedDeviceRow(d.id, `sim-${start + i + j}`, '{}', now), public_key: d.publicKeyPem })))
        .execute();
      await trx
        .insertInto('nodes')
        .values(slice.map((d, j) => ({ node_id: d.id, parent_id: parent, type: 'device', title: `sim-${start + i + j}`, tags: '[]', created_at: now })))
        .execute();
    });
  }
  return out;
}

/** Connects one simulated agent: answers `config` by fetching its files and sending `config_applied`. */
async function simulate(
  t: TestBroker,
  device: { id: string; privateKey: crypto.KeyObject; publicKeyPem: string },
  onApplied: (a: SimAgent) => void,
): Promise<SimAgent> {
  const conn = await connectDevice(t.url, device);
  if (!conn.welcome) throw new Error('the broker refused a simulated agent');
  const agent: SimAgent = { id: device.id, conn, applied: '' };
  const waiting = new Map<string, { resolve: (data: Buffer) => void; reject: (e: Error) => void }>();
  new Mux(conn.ws, {
    receives: FROM_BROKER,
    onOpen: async (channel: Channel) => {
      const params = channel.params as { id?: string };
      const chunks: Buffer[] = [];
      channel.on('data', (c: Buffer) => chunks.push(c));
      channel.on('end', () => {
        const w = waiting.get(String(params.id));
        waiting.delete(String(params.id));
        w?.resolve(Buffer.concat(chunks));
      });
      return {};
    },
  });
  let seq = 0;
  const fetchFile = (file: string): Promise<Buffer> =>
    new Promise((resolve, reject) => {
      const id = `f${++seq}`;
      waiting.set(id, { resolve, reject });
      conn.send({ t: 'file_request', id, path: file });
    });
  const apply = async (config: { commit_id: string; bundle_data: { file_distribution?: { files?: { templates?: { source: string }[] }[] } } }) => {
    const files: string[] = (config.bundle_data.file_distribution?.files ?? []).flatMap((f) => (f.templates ?? []).map((tpl) => tpl.source));
    for (const file of files) {
      for (let attempt = 0; ; attempt++) {
        try {
          await fetchFile(file);
          break;
        } catch {
          // refused as busy: ask again after a short, jittered pause (as an agent's next run would)
          await new Promise((r) => setTimeout(r, 10 + Math.random() * 40 * Math.min(attempt + 1, 5)));
        }
      }
    }
    conn.send({
      t: 'config_applied',
      commit_id: config.commit_id,
      reports: files.length
        ? [
            {
              bundle: 'file_distribution',
              bundle_commit_id: config.commit_id,
              commit_id: config.commit_id,
              labels: 'file_distribution',
              sev: 'INFO',
              text: 'Successfully rendered template file',
              ts: Math.floor(Date.now() / 1000),
            },
          ]
        : [],
    });
    agent.applied = config.commit_id;
    onApplied(agent);
  };
  let running: Promise<void> = Promise.resolve();
  conn.ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    const msg = JSON.parse(String(data));
    if (msg.t === 'config') running = running.then(() => apply(msg.config)).catch(() => undefined);
    else if (msg.t === 'file_refused') {
      const w = waiting.get(String(msg.id));
      waiting.delete(String(msg.id));
      w?.reject(new Error(String(msg.error)));
    }
  });
  return agent;
}

async function benchPropagation(log: Log): Promise<void> {
  // every simulated agent connects from 127.0.0.1: the per-address handshake and connection limits (meant for many
  // real addresses) is raised, and they connect 25 at a time
  const t = await startTestBroker({ env: { AGENT_HANDSHAKES_PER_ADDRESS: '256', MAX_CONNECTIONS_PER_ADDRESS: '0' } });
  const agents: SimAgent[] = [];
  try {
    await t.addGroup({ id: 'sim', title: 'Simulated' });
    const up = await t.api('POST', '/api/v2/file', { token: t.adminToken, body: form('/bench/', 'motd.tpl', 'hello {{site}}\n') });
    if (up.status !== 200) throw new Error(`upload refused: ${up.status}`);
    // The broker records a device's applied commit when its config_applied arrives; count those.
    let waitingFor = '';
    const done = new Set<string>();
    let allDone: (() => void) | undefined;
    let target = 0;
    const onApplied = (a: SimAgent) => {
      if (a.applied !== waitingFor || done.has(a.id)) return;
      done.add(a.id);
      if (done.size === target) allDone?.();
    };
    let round = 0;
    for (const n of [100, 1000]) {
      const keys = await enrolKeys(t, n - agents.length, 'sim', agents.length);
      for (let i = 0; i < keys.length; i += 25) agents.push(...(await Promise.all(keys.slice(i, i + 25).map((k) => simulate(t, k, onApplied)))));
      await t.broker.services.configuration.settled();
      // let the configuration sent on connect be applied first
      await new Promise((r) => setTimeout(r, 500));
      round += 1;
      done.clear();
      target = agents.length;
      const finished = new Promise<void>((resolve) => (allDone = resolve));
      const started = performance.now();
      const shaPromise = commit(t, `bench ${round}`, [
        {
          node_id: 'sim',
          formtype: 'file_distribution',
          extend: false,
          config: { files: [{ label: `r${round}`, templates: [{ source: '/bench/motd.tpl', destination: `/etc/motd-${round}`, is_template: true }] }] },
        },
      ]);
      waitingFor = await shaPromise;
      // agents that answered before the sha was known
      for (const a of agents) onApplied(a);
      const timeout = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 60_000).unref());
      const outcome = await Promise.race([finished.then(() => 'ok' as const), timeout]);
      // the time counts until the broker has recorded every device's config_applied
      const recordedCount = async () =>
        (await t.broker.services.store.db.selectFrom('device_config').select('device_id').where('device_commit_sha', '=', waitingFor).execute()).length;
      let recorded = await recordedCount();
      for (let i = 0; outcome === 'ok' && recorded < n && i < 500; i++) {
        await new Promise((r) => setTimeout(r, 10));
        recorded = await recordedCount();
      }
      const ms = performance.now() - started;
      log(
        `commit → applied on ${n} simulated agents: ${outcome === 'ok' ? `${ms.toFixed(0)} ms` : `timed out with ${done.size}/${n}`} ` +
          `(${recorded} recorded by the broker; target ≤ ${TARGET_PROPAGATION_MS} ms at 1000)`,
      );
    }
  } finally {
    for (const a of agents) a.conn.ws.terminate();
    await t.close();
  }
}

// ---- rendering ----------------------------------------------------------------------------------

const TAGS = Array.from({ length: 100 }, (_, i) => `tag${i}`);

/** Root → 4 levels of groups (4 × 4 × 4 × 4 = 256 leaf groups), groups tagged from the 100 tags. */
async function buildTree(t: TestBroker): Promise<string[]> {
  const db = t.broker.services.store.db;
  const now = new Date().toISOString();
  const rows: Insertable<NodesTable>[] = [];
  let level: string[] = ['root'];
  let k = 0;
  for (let depth = 1; depth <= 4; depth++) {
    const next: string[] = [];
    for (const parent of level)
      for (let i = 0; i < 4; i++) {
        const id = `${parent === 'root' ? 'g' : parent}-${i}`;
        rows.push({ node_id: id, parent_id: parent, type: 'group', title: id, tags: JSON.stringify([TAGS[k++ % TAGS.length]]), created_at: now });
        next.push(id);
      }
    level = next;
  }
  for (let i = 0; i < rows.length; i += 200)
    await db
      .insertInto('nodes')
      .values(rows.slice(i, i + 200))
      .execute();
  return level;
}

async function addDevices(t: TestBroker, leaves: string[], count: number, start: number): Promise<void> {
  const db = t.broker.services.store.db;
  const now = new Date().toISOString();
  for (let i = 0; i < count; i += 500) {
    const devices: Insertable<DevicesTable>[] = [];
    const nodes: Insertable<NodesTable>[] = [];
    for (let j = i; j < Math.min(count, i + 500); j++) {
      const n = start + j;
      const id = crypto.createHash('sha256').update(`render-device-${n}`).digest('hex');
      devices.push(approvedDeviceRow(id, `dev-${n}`, JSON.stringify({ device_name: `dev-${n}`, custom: { site: `s${n % 50}` } }), now));
      nodes.push({
        node_id: id,
        parent_id: leaves[n % leaves.length],
        type: 'device',
        title: `dev-${n}`,
        tags: JSON.stringify([TAGS[(n * 7) % TAGS.length]]),
        created_at: now,
      });
    }
    await db.transaction().execute(async (trx) => {
      await trx.insertInto('devices').values(devices).execute();
      await trx.insertInto('nodes').values(nodes).execute();
    });
  }
}

async function benchRender(log: Log): Promise<void> {
  const t = await startTestBroker();
  const configuration = t.broker.services.configuration;
  try {
    const leaves = await buildTree(t);
    // configuration on root, on groups of every level, and on each of the 100 tags
    await commit(t, 'base', [
      { node_id: 'root', formtype: 'ntp', config: { servers: ['0.pool.ntp.org'] } },
      { node_id: 'root', formtype: 'settings', config: { agentinterval: 5, reports: true } },
      { node_id: 'g-0', formtype: 'parameters', config: { parameters: [{ key: 'zone', value: 'a' }] } },
      { node_id: 'g-0-1', formtype: 'users', extend: true, config: { items: [{ username: 'ops', action: 'add' }] } },
      { node_id: 'g-1-2-3', formtype: 'package_management', config: { items: [{ name: 'curl', version: '' }] } },
      { node_id: 'g-2-0-1-3', formtype: 'proc_watch', config: { processes: [{ name: 'app', policy: 'Present', command: 'app &' }] } },
    ]);
    for (let i = 0; i < TAGS.length; i += 50)
      await commit(
        t,
        `tags ${i}`,
        TAGS.slice(i, i + 50).map((tag, j) => ({
          tag,
          formtype: j % 2 ? 'file_distribution' : 'parameters',
          extend: true,
          config:
            j % 2
              ? { files: [{ label: tag, templates: [{ source: `/t/${tag}.tpl`, destination: `/etc/${tag}`, is_template: true }] }] }
              : { parameters: [{ key: tag, value: '1' }] },
        })),
      );
    const figures: { n: number; commitMs: number; renderMs: number }[] = [];
    let have = 0;
    for (const n of [1000, 10_000]) {
      await addDevices(t, leaves, n - have, have);
      have = n;
      await configuration.propagate(); // records the new devices
      const started = performance.now();
      await commit(t, `root change ${n}`, [{ node_id: 'root', formtype: 'ntp', config: { servers: [`${n}.pool.ntp.org`] } }]);
      await configuration.settled();
      const commitMs = performance.now() - started;
      // renders every device and finds nothing changed: the best of 3 (the machine is shared)
      let renderMs = Infinity;
      for (let i = 0; i < 3; i++) {
        const renderStart = performance.now();
        await configuration.propagate();
        renderMs = Math.min(renderMs, performance.now() - renderStart);
      }
      figures.push({ n, commitMs, renderMs });
      log(
        `render ${n} devices (5-level tree, 100 tags): commit → all rendered and recorded ${commitMs.toFixed(0)} ms (${((commitMs * 1000) / n).toFixed(0)} µs/device); ` +
          `render-only pass ${renderMs.toFixed(0)} ms (${((renderMs * 1000) / n).toFixed(0)} µs/device)`,
      );
    }
    const [small, large] = figures;
    log(
      `render 10k/1k ratio: commit → recorded ${(large.commitMs / small.commitMs).toFixed(1)}, render-only ${(large.renderMs / small.renderMs).toFixed(1)} ` +
        `(target ≤ ${TARGET_RENDER_RATIO} for 10× the devices)`,
    );
  } finally {
    await t.close();
  }
}

export async function benchConfig(log: Log, only?: string): Promise<void> {
  if (!only || only === 'propagation') await benchPropagation(log);
  if (!only || only === 'render') await benchRender(log);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  benchConfig((line) => console.log(line), process.argv[2]).then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
