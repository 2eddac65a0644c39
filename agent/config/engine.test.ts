/**
 * The engine over a real mux pair: the broker end sends `config`, serves `file_request` with
 * `file` channels (or refuses), and reads `config_applied`.
 */
import crypto from 'node:crypto';
import { getEventListeners } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Mux } from '../../shared/mux.js';
import type { AgentReport, CommittedConfig, ControlMessage } from '../../shared/protocol.js';
import { muxPair } from '../../test/support/mux-pair.js';
import type { Bundle } from './bundle.js';
import { ConfigEngine, type BundleLoader } from './engine.js';
import { checkDefaults, DEFAULT_INTERVAL_MINUTES } from './received.js';
import { FileFetcher } from './files.js';
import { loadAgentBundle } from './registry.js';
import { SYSTEM_PATH } from './test-support/system-test-context.js';
import type { AgentMessage, BrokerMessage } from '../../shared/wire.js';

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');
type Applied = Extract<ControlMessage, { t: 'config_applied' }>;

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function tempDir(): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-engine-')));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A broker end with a file store; collects what the agent sends. */
function fakeBroker(broker: Mux<AgentMessage>, store: Record<string, string>, opts: { lie?: boolean; oversize?: boolean; silent?: boolean } = {}) {
  const applied: Applied[] = [];
  const others: AgentMessage[] = [];
  const requests: string[] = [];
  const waiting: ((m: Applied) => void)[] = [];
  broker.on('control', (msg: AgentMessage) => {
    if (msg.t === 'file_request') {
      requests.push(msg.path);
      const content = store[msg.path];
      if (content === undefined) {
        broker.send({ t: 'file_refused', id: msg.id, error: 'no such file in the file store' });
        return;
      }
      if (opts.silent) return;
      const bytes = Buffer.from(content);
      const size = opts.oversize ? 3 : bytes.length;
      void broker
        .open('file', { id: msg.id, path: msg.path, size, sha256: opts.lie ? sha('something else') : sha(bytes) })
        .then(({ channel }) => {
          channel.resume();
          channel.end(bytes);
        })
        .catch(() => {});
      return;
    }
    if (msg.t === 'config_applied') {
      // as the agent sent it: the broker reads the reports into CheckedReports
      const sent: Applied = { t: 'config_applied', commit_id: msg.commit_id, reports: msg.reports.valid };
      applied.push(sent);
      waiting.shift()?.(sent);
      return;
    }
    others.push(msg);
  });
  return {
    applied,
    others,
    requests,
    /** the next config_applied */
    next: () => new Promise<Applied>((resolve) => waiting.push(resolve)),
  };
}

async function setup(
  opts: {
    bundles?: readonly Bundle[] | BundleLoader;
    minuteMs?: number;
    lie?: boolean;
    oversize?: boolean;
    silent?: boolean;
    fetchTimeoutMs?: number;
    store?: Record<string, string>;
    reboot?: () => Promise<void>;
    agent?: { setMetricsEnabled(enabled: boolean): void };
    bundleTimeoutMs?: number;
  } = {},
) {
  const dir = tempDir();
  const root = path.join(dir, 'root');
  fs.mkdirSync(root);
  const stateDir = path.join(dir, 'state');
  const engine = new ConfigEngine({
    stateDir,
    root,
    bundles: opts.bundles ?? loadAgentBundle,
    env: { ...process.env, PATH: SYSTEM_PATH },
    minuteMs: opts.minuteMs,
    fetchTimeoutMs: opts.fetchTimeoutMs,
    reboot: opts.reboot,
    agent: opts.agent,
    bundleTimeoutMs: opts.bundleTimeoutMs,
  });
  cleanups.push(() => engine.stop());
  const pair = await muxPair((channel) => engine.handleChannel(channel));
  cleanups.push(pair.close);
  pair.agent.on('control', (msg: BrokerMessage) => engine.handleControl(msg));
  await engine.start();
  /** the types of what the engine sent, in order, as it sent them */
  const sent: string[] = [];
  const send = (msg: ControlMessage) => {
    sent.push(msg.t);
    pair.agent.send(msg);
  };
  engine.attach(send);
  const broker = fakeBroker(pair.broker, opts.store ?? {}, opts);
  return {
    dir,
    root,
    stateDir,
    engine,
    broker,
    brokerMux: pair.broker,
    send: (msg: ControlMessage) => pair.broker.send(msg),
    /** the connection comes back */
    reattach: () => engine.attach(send),
    sent,
  };
}

const TEMPLATE = 'listen={{port}}\nsite={{site}}\nrack={{ rack }}\ntoken={{token}}\n';

function appConfig(commit = 'c0ffee01'): CommittedConfig {
  return {
    commit_id: commit,
    bundles: ['file_distribution', 'parameters'],
    bundle_data: {
      parameters: { enabled: true, bundle_commit_id: 'p1', parameters: [{ key: 'site', value: 'oslo' }], secrets: [{ key: 'token', value: 's3cr3t-t0ken' }] },
      file_distribution: {
        enabled: true,
        bundle_commit_id: 'f1',
        files: [
          {
            label: 'app',
            templates: [{ source: '/templates/app.conf', destination: '/etc/app/app.conf', is_template: true }],
            parameters: [{ key: 'port', value: '8080' }],
            command: 'echo "reloaded with $(token)"',
          },
        ],
      },
    },
  };
}

const texts = (reports: AgentReport[]) => reports.map((r) => `${r.bundle} ${r.sev} ${r.text}`);

describe('configuration engine', () => {
  it('renders a template fetched over a file channel with parameters and device attributes, and answers config_applied', async () => {
    const s = await setup({ store: { '/templates/app.conf': TEMPLATE } });
    const applied = s.broker.next();
    s.send({ t: 'config', config: appConfig(), attributes: { rack: 'r-17' } });
    const first = await applied;
    expect(first.commit_id).toBe('c0ffee01');
    expect(fs.readFileSync(path.join(s.root, 'etc/app/app.conf'), 'utf8')).toBe('listen=8080\nsite=oslo\nrack=r-17\ntoken=s3cr3t-t0ken\n');
    expect(s.broker.requests).toEqual(['/templates/app.conf']);
    // parameters first (qbee's order), then the files
    expect(texts(first.reports)).toEqual([
      'parameters INFO Parameters updated: 1 parameter(s), 1 secret(s).',
      'file_distribution INFO [app] Successfully rendered template file /templates/app.conf to /etc/app/app.conf',
      'file_distribution INFO [app] Successfully executed after command',
    ]);
    const after = first.reports[2];
    expect(after).toMatchObject({ bundle_commit_id: 'f1', commit_id: 'c0ffee01', labels: 'file_distribution' });
    // the secret is redacted from the after-command's output
    expect(Buffer.from(after.log!, 'base64').toString()).toBe('reloaded with ********\n');
    expect(JSON.stringify(first)).not.toContain('s3cr3t-t0ken');

    // kept atomically, private, and read back by a new engine (a restarted agent)
    const kept = path.join(s.stateDir, 'config.json');
    expect(fs.statSync(kept).mode & 0o777).toBe(0o600);
    const again = new ConfigEngine({ stateDir: s.stateDir, bundles: loadAgentBundle });
    await again.start();
    expect(again.commitId).toBe('c0ffee01');
    again.stop();

    // the same configuration again: nothing changes, and no bundle reports (qbee reports only what
    // a bundle did), yet the run is still acknowledged with its commit
    const second = s.broker.next();
    s.engine.trigger();
    const rerun = await second;
    expect(rerun.commit_id).toBe('c0ffee01');
    expect(texts(rerun.reports)).toEqual([]);
  });

  it('loads a bundle when a configuration first names it, reports one that cannot be loaded, and goes on', async () => {
    const loaded: string[] = [];
    const applied: string[] = [];
    const loader: BundleLoader = async (name) => {
      loaded.push(name);
      if (name === 'users') throw new Error('Cannot find module');
      if (name === 'rauc_v9') return undefined;
      return { name, parse: (data) => data, apply: async () => void applied.push(name) };
    };
    const s = await setup({ bundles: loader });
    expect(loaded).toEqual([]);
    const answer = s.broker.next();
    s.send({
      t: 'config',
      config: {
        commit_id: 'l1',
        bundles: ['rauc_v9', 'users', 'sshkeys', 'ntp'],
        bundle_data: { rauc_v9: {}, users: {}, sshkeys: {}, ntp: { enabled: false } },
      },
      attributes: {},
    });
    expect(texts((await answer).reports)).toEqual([
      'users ERR users could not be loaded: Cannot find module. Nothing applied.',
      'rauc_v9 WARN This agent does not support the rauc_v9 bundle: nothing applied.',
    ]);
    expect(applied).toEqual(['sshkeys']);
    // the configuration's bundles only (settings, parameters and the others it does not name are never loaded)
    expect(new Set(loaded)).toEqual(new Set(['users', 'sshkeys', 'ntp', 'rauc_v9']));
  });

  it('reports a file the broker refuses, a file whose checksum does not match, unknown, empty and invalid bundles', async () => {
    const s = await setup({ store: {} });
    const config: CommittedConfig = {
      commit_id: 'c2',
      bundles: ['file_distribution', 'rauc_v9', 'users', 'sshkeys', 'password'],
      bundle_data: {
        file_distribution: { files: [{ templates: [{ source: '/missing.txt', destination: '/etc/missing.txt' }] }] },
        users: { items: [{ username: 'x', action: 'explode' }] },
        password: { enabled: false, users: [{ username: 'root', passwordhash: 'x' }] },
      },
    };
    const applied = s.broker.next();
    s.send({ t: 'config', config, attributes: {} });
    expect(texts((await applied).reports)).toEqual([
      'file_distribution ERR Unable to download file /missing.txt to /etc/missing.txt: the broker refused /missing.txt: no such file in the file store',
      'users ERR Invalid users configuration: users.items[0].action must be add or remove. Nothing applied.',
      'sshkeys ERR The configuration names the sshkeys bundle but carries no data for it: nothing applied.',
      'rauc_v9 WARN This agent does not support the rauc_v9 bundle: nothing applied.',
    ]);
    expect(fs.existsSync(path.join(s.root, 'etc/missing.txt'))).toBe(false);
  });

  it('refuses a file whose bytes do not match the announced checksum, and a file channel nobody asked for', async () => {
    const s = await setup({ store: { '/templates/app.conf': TEMPLATE }, lie: true });
    const applied = s.broker.next();
    s.send({ t: 'config', config: appConfig(), attributes: {} });
    const reports = (await applied).reports.filter((r) => r.sev === 'ERR');
    expect(reports.map((r) => r.text)).toEqual([expect.stringContaining('checksum mismatch')]);
    expect(fs.existsSync(path.join(s.root, 'etc/app/app.conf'))).toBe(false);
    expect(fs.readdirSync(path.join(s.stateDir, 'config', 'downloads'))).toEqual([]);
    await expect(s.brokerMux.open('file', { id: 'never-asked', path: '/etc/passwd', size: 1, sha256: sha('x') })).rejects.toThrow(
      'No file was requested with this id.',
    );
  });

  it('stops a file with more bytes than announced, and gives up on a broker that never sends', async () => {
    const big = await setup({ store: { '/templates/app.conf': TEMPLATE }, oversize: true });
    const applied = big.broker.next();
    big.send({ t: 'config', config: appConfig(), attributes: {} });
    expect(texts((await applied).reports)).toContain(
      'file_distribution ERR [app] Unable to render template file /templates/app.conf to /etc/app/app.conf: cannot fetch /templates/app.conf: more bytes arrived than the announced 3',
    );
    expect(fs.existsSync(path.join(big.root, 'etc/app/app.conf'))).toBe(false);

    const silent = await setup({ store: { '/templates/app.conf': TEMPLATE }, silent: true, fetchTimeoutMs: 100 });
    const answered = silent.broker.next();
    silent.send({ t: 'config', config: appConfig(), attributes: {} });
    expect(texts((await answered).reports)).toContain(
      'file_distribution ERR [app] Unable to render template file /templates/app.conf to /etc/app/app.conf: the broker did not send /templates/app.conf in time',
    );
    expect(silent.engine.files.inFlight).toBe(0);
  });

  it('a config message that is not one is refused with a report, and the one kept stays', async () => {
    const s = await setup();
    s.send({ t: 'config', config: { commit_id: 5, bundles: 'all' } as unknown as CommittedConfig, attributes: {} });
    await expect.poll(() => s.broker.others.length).toBe(1);
    const msg = s.broker.others[0];
    expect(msg).toMatchObject({
      t: 'reports',
      reports: { valid: [{ bundle: 'agent_internal', sev: 'ERR', text: expect.stringContaining('config.commit_id must be a string') }] },
    });
    expect(s.engine.commitId).toBeUndefined();
    expect(fs.existsSync(path.join(s.stateDir, 'config.json'))).toBe(false);
  });

  it('runs one at a time, in qbee order, and a configuration arriving during a run is applied right after', async () => {
    let active = 0;
    let maxActive = 0;
    const order: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const fake = (name: string): Bundle => ({
      name,
      parse: (d) => d,
      async apply(_d, ctx) {
        active++;
        maxActive = Math.max(maxActive, active);
        order.push(`${ctx.commitId}:${name}`);
        await gate;
        active--;
      },
    });
    const s = await setup({ bundles: [fake('password'), fake('users')] });
    const config = (commit: string): CommittedConfig => ({ commit_id: commit, bundles: ['password', 'users'], bundle_data: { password: {}, users: {} } });
    const first = s.broker.next();
    s.send({ t: 'config', config: config('a'), attributes: {} });
    await expect.poll(() => order.length).toBe(1);
    s.send({ t: 'config', config: config('b'), attributes: {} });
    s.engine.trigger();
    s.engine.trigger();
    await expect.poll(() => s.engine.commitId).toBe('b');
    const second = s.broker.next();
    release();
    expect((await first).commit_id).toBe('a');
    expect((await second).commit_id).toBe('b');
    await s.engine.settled();
    expect(maxActive).toBe(1);
    expect(order).toEqual(['a:users', 'a:password', 'b:users', 'b:password']);
    expect(s.broker.applied).toHaveLength(2);
  });

  it('re-applies on the interval from settings.agentinterval, repairing drift', async () => {
    const s = await setup({ store: { '/templates/app.conf': TEMPLATE }, minuteMs: 50 });
    const config = appConfig();
    config.bundles.push('settings');
    config.bundle_data.settings = { enabled: true, agentinterval: 1 };
    const first = s.broker.next();
    s.send({ t: 'config', config, attributes: {} });
    await first;
    expect(s.engine.interval).toBe(1);
    const file = path.join(s.root, 'etc/app/app.conf');
    fs.writeFileSync(file, 'drifted\n');
    // no message from the broker: the interval alone brings the file back
    await expect.poll(() => fs.readFileSync(file, 'utf8'), { timeout: 5000 }).toContain('listen=8080');
  });

  it('adopts the account default interval the broker sends when no enabled settings bundle sets one, and keeps it across a restart', async () => {
    const s = await setup({ store: { '/templates/app.conf': TEMPLATE } });
    expect(s.engine.interval).toBe(DEFAULT_INTERVAL_MINUTES);
    let applied = s.broker.next();
    s.send({ t: 'config', config: appConfig('d0000001'), attributes: {}, defaults: { agent_interval: 17 } });
    await applied;
    expect(s.engine.interval).toBe(17);

    // A settings bundle's own interval wins; disabled, the default holds again.
    const withSettings = appConfig('d0000002');
    withSettings.bundles.push('settings');
    withSettings.bundle_data.settings = { enabled: true, agentinterval: 3 };
    applied = s.broker.next();
    s.send({ t: 'config', config: withSettings, attributes: {}, defaults: { agent_interval: 17 } });
    await applied;
    expect(s.engine.interval).toBe(3);
    const disabled = appConfig('d0000003');
    disabled.bundles.push('settings');
    disabled.bundle_data.settings = { enabled: false, agentinterval: 3 };
    applied = s.broker.next();
    s.send({ t: 'config', config: disabled, attributes: {}, defaults: { agent_interval: 17 } });
    await applied;
    expect(s.engine.interval).toBe(17);

    // A restarted agent runs on the default it kept until the broker says otherwise.
    const restarted = new ConfigEngine({ stateDir: s.stateDir, root: s.root, bundles: loadAgentBundle, env: { ...process.env, PATH: SYSTEM_PATH } });
    cleanups.push(() => restarted.stop());
    await restarted.start();
    expect(restarted.interval).toBe(17);

    // A default the broker changes is adopted with the next configuration; one out of range is not.
    applied = s.broker.next();
    s.send({ t: 'config', config: appConfig('d0000004'), attributes: {}, defaults: { agent_interval: 42 } });
    await applied;
    expect(s.engine.interval).toBe(42);
    for (const bad of [0, 1441, 2.5, '7', null]) {
      applied = s.broker.next();
      s.send({ t: 'config', config: appConfig(`d00000${String(bad).replace(/\W/g, '')}9`), attributes: {}, defaults: { agent_interval: bad } as never });
      await applied;
      expect(s.engine.interval, String(bad)).toBe(DEFAULT_INTERVAL_MINUTES);
    }
  });

  it('reads the defaults field by field: anything malformed is no default', () => {
    expect(checkDefaults({ agent_interval: 10 })).toEqual({ agent_interval: 10 });
    for (const bad of [undefined, null, 'x', [], { agent_interval: -1 }, { agent_interval: '10' }, { other: 1 }]) expect(checkDefaults(bad)).toEqual({});
  });

  it('turns metrics off with settings.metrics false, and back on when the settings bundle goes', async () => {
    const turned: boolean[] = [];
    const s = await setup({ store: { '/templates/app.conf': TEMPLATE }, agent: { setMetricsEnabled: (on) => void turned.push(on) } });
    const config = appConfig('c0ffee02');
    config.bundles.push('settings');
    config.bundle_data.settings = { enabled: true, agentinterval: 5, metrics: false };
    let applied = s.broker.next();
    s.send({ t: 'config', config, attributes: {} });
    await applied;
    expect(turned).toEqual([false]);
    applied = s.broker.next();
    s.send({ t: 'config', config: appConfig('c0ffee03'), attributes: {} });
    await applied;
    expect(turned).toEqual([false, true]);
  });

  it('keeps results while disconnected and sends them on the next connection, which also re-applies', async () => {
    const s = await setup({ store: { '/templates/app.conf': TEMPLATE } });
    const first = s.broker.next();
    s.send({ t: 'config', config: appConfig(), attributes: {} });
    await first;
    s.engine.detach();
    fs.rmSync(path.join(s.root, 'etc/app/app.conf'));
    await s.engine.settled(true); // offline: the template is cached by nothing (no digest), so fetching fails
    expect(s.broker.applied).toHaveLength(1);
    const flushed = s.broker.next();
    const rerun = s.broker.next();
    s.reattach();
    expect(texts((await flushed).reports)).toContain(
      'file_distribution ERR [app] Unable to render template file /templates/app.conf to /etc/app/app.conf: cannot fetch /templates/app.conf: not connected to the broker',
    );
    expect(texts((await rerun).reports)).toContain('file_distribution INFO [app] Successfully rendered template file /templates/app.conf to /etc/app/app.conf');
    expect(fs.existsSync(path.join(s.root, 'etc/app/app.conf'))).toBe(true);
  });

  it('reboots once after the run when a bundle asks for it, having sent the run first', async () => {
    const events: string[] = [];
    const asking: Bundle = { name: 'rauc', parse: (d) => d, apply: async (_d, ctx) => ctx.requestReboot?.('RAUC bundle installed') };
    const s = await setup({ bundles: [asking], reboot: async () => void events.push(`reboot after sending ${s.sent.join(', ')}`) });
    const applied = s.broker.next();
    s.send({ t: 'config', config: { commit_id: 'r', bundles: ['rauc'], bundle_data: { rauc: {} } }, attributes: {} });
    expect(texts((await applied).reports)).toEqual(['rauc WARN Scheduling system reboot: RAUC bundle installed']);
    await s.engine.settled();
    expect(events).toEqual(['reboot after sending config_applied']);
  });

  it('reboots through the watchdog after the threshold of failed connections', async () => {
    let reboots = 0;
    const s = await setup({ reboot: async () => void reboots++ });
    const applied = s.broker.next();
    s.send({
      t: 'config',
      config: { commit_id: 'w', bundles: ['connectivity_watchdog'], bundle_data: { connectivity_watchdog: { threshold: '2' } } },
      attributes: {},
    });
    await applied;
    s.engine.detach();
    await s.engine.connectionFailed();
    expect(reboots).toBe(0);
    await s.engine.connectionFailed();
    expect(reboots).toBe(1);
  });

  it('stops a bundle that never returns at the time bound: the run goes on to the next bundle, and the next commit is applied', async () => {
    let hung = 0;
    let aborted = 0;
    const ran: string[] = [];
    const stuck: Bundle = {
      name: 'users',
      parse: (d) => d,
      // a bundle blocked for good (as one reading a FIFO was), deaf to its signal
      apply: (_d, ctx) => {
        hung++;
        ctx.signal.addEventListener('abort', () => aborted++);
        return new Promise<void>(() => {});
      },
    };
    const next: Bundle = { name: 'sshkeys', parse: (d) => d, apply: async (_d, ctx) => void ran.push(ctx.commitId) };
    const s = await setup({ bundles: [stuck, next], bundleTimeoutMs: 100 });
    const config = (commit: string): CommittedConfig => ({ commit_id: commit, bundles: ['users', 'sshkeys'], bundle_data: { users: {}, sshkeys: {} } });
    let applied = s.broker.next();
    s.send({ t: 'config', config: config('one'), attributes: {} });
    const first = await applied;
    expect(first.commit_id).toBe('one');
    expect(texts(first.reports)).toEqual(['users ERR users did not finish within 100 ms: stopped, the other bundles go on.']);
    expect(aborted).toBe(1);
    applied = s.broker.next();
    s.send({ t: 'config', config: config('two'), attributes: {} });
    const second = await applied;
    expect(second.commit_id).toBe('two');
    // not started a second time while the first is still stuck
    expect(texts(second.reports)).toEqual(['users ERR users has not stopped since an earlier run ran out of time: not applied in this run.']);
    expect(hung).toBe(1);
    expect(ran).toEqual(['one', 'two']);
  });

  it('writes a distributed file straight from the file channel, never through a download of its own', async () => {
    const bytes = crypto.randomBytes(300 * 1024).toString('base64');
    const s = await setup({ store: { '/bin/blob': bytes } });
    const config: CommittedConfig = {
      commit_id: 'stream',
      bundles: ['file_distribution'],
      bundle_data: { file_distribution: { files: [{ label: 'b', templates: [{ source: '/bin/blob', destination: '/opt/blob', is_template: false }] }] } },
    };
    const applied = s.broker.next();
    s.send({ t: 'config', config, attributes: {} });
    expect(texts((await applied).reports)).toEqual(['file_distribution INFO [b] Successfully downloaded file /bin/blob to /opt/blob']);
    expect(fs.readFileSync(path.join(s.root, 'opt/blob'), 'utf8')).toBe(bytes);
    expect(fs.existsSync(path.join(s.stateDir, 'config', 'downloads'))).toBe(false);
    expect(fs.readdirSync(path.join(s.root, 'opt'))).toEqual(['blob']);

    // with the digest the broker puts in the manifest, a file already in place is not fetched again
    const withDigest = structuredClone(config);
    (withDigest.bundle_data.file_distribution as { files: { templates: { digest?: string }[] }[] }).files[0].templates[0].digest = sha(bytes);
    const again = s.broker.next();
    s.send({ t: 'config', config: { ...withDigest, commit_id: 'stream2' }, attributes: {} });
    expect(texts((await again).reports)).toEqual([]);
    expect(s.broker.requests).toEqual(['/bin/blob']);
  });
});

describe('file fetcher', () => {
  it('leaves no abort listener on the run signal once a fetch ends, however many fetches a run makes', async () => {
    const fetcher = new FileFetcher(path.join(tempDir(), 'downloads'));
    fetcher.attach((msg) => {
      if (msg.t === 'file_request') setImmediate(() => fetcher.refused(msg.id, 'no such file in the file store'));
    });
    const run = new AbortController();
    for (let i = 0; i < 500; i++) await expect(fetcher.fetch(`/f${i}`, run.signal)).rejects.toThrow('no such file');
    expect(getEventListeners(run.signal, 'abort')).toHaveLength(0);
    expect(fetcher.inFlight).toBe(0);
  });
});

describe('device attributes are data, never code', () => {
  const SUDOERS = 'deploy ALL=(root) NOPASSWD: /bin/systemctl restart {{svc}}\n';

  it('never puts an attribute holding a newline into a template or a command, and says which one it left out', async () => {
    const s = await setup({ store: { '/templates/sudoers': SUDOERS } });
    const out = path.join(s.dir, 'location.txt');
    const config: CommittedConfig = {
      commit_id: 'inj1',
      bundles: ['file_distribution', 'proc_watch'],
      bundle_data: {
        file_distribution: {
          files: [{ label: 'sudo', templates: [{ source: '/templates/sudoers', destination: '/etc/sudoers.d/deploy', is_template: true }] }],
        },
        proc_watch: {
          processes: [{ name: 'no-such-process-inj', policy: 'Present', command: `cd "${s.dir}"; echo $(location) > "${out}"` }],
        },
      },
    };
    const applied = s.broker.next();
    s.send({
      t: 'config',
      config,
      attributes: { svc: 'app\nALL ALL=(ALL) NOPASSWD: ALL', location: 'berlin; id > INJECTED; echo', nul: 'a\u0000b' },
    });
    const run = await applied;
    // the sudoers line stays one line: the attribute with a newline is no parameter at all
    expect(fs.readFileSync(path.join(s.root, 'etc/sudoers.d/deploy'), 'utf8')).toBe(SUDOERS);
    // the one-line value reaches the command as data
    expect(fs.readFileSync(out, 'utf8')).toBe('berlin; id > INJECTED; echo\n');
    expect(fs.existsSync(path.join(s.dir, 'INJECTED'))).toBe(false);
    expect(texts(run.reports)).toEqual([
      'file_distribution INFO [sudo] Successfully rendered template file /templates/sudoers to /etc/sudoers.d/deploy',
      'proc_watch INFO Restarting process no-such-process-inj using the defined command as it was not running: done',
    ]);
    const reports = s.broker.others.flatMap((m) => (m.t === 'reports' ? m.reports.valid : []));
    expect(reports.map((r) => `${r.bundle} ${r.sev} ${r.text}`)).toEqual([
      'agent_internal ERR Device attributes "svc", "nul" not used as parameters: a value holds a control character (a newline, NUL, …).',
    ]);
    // not kept either
    expect(fs.readFileSync(path.join(s.stateDir, 'config.json'), 'utf8')).not.toContain('NOPASSWD: ALL');
  });

  it('fails a bundle whose command names an unknown $(key), naming it, and runs nothing', async () => {
    const s = await setup();
    const marker = path.join(s.dir, 'ran');
    const applied = s.broker.next();
    s.send({
      t: 'config',
      config: {
        commit_id: 'inj2',
        bundles: ['file_distribution'],
        bundle_data: { file_distribution: { files: [{ label: 'x', templates: [], pre_condition: `touch "${marker}"; test -n $(location)` }] } },
      },
      attributes: {},
    });
    expect(texts((await applied).reports)).toEqual([
      'file_distribution ERR [x] File set not applied: unknown parameter $(location): no parameter, secret or device attribute has this key.',
    ]);
    expect(fs.existsSync(marker)).toBe(false);
  });
});
