/**
 * `npm run bench -- cli`: how long the installed `fleet` takes to start, against bare `node -e 0` in
 * the same run: `fleet --help`, and `fleet devices` against a broker started here. The CLI is built
 * (`npm run build:cli`, into a temporary directory) and run as install-cli.sh lays it out
 * (<prefix>/bin/fleet). Target: at most 1.5× node's own start. Medians of several runs, printed only.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildCli } from '../cli/packaging/build.js';
import { ADMIN, startTestBroker } from '../test/support/broker.js';

const RUNS = 15;

function once(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${stderr.trim()}`));
      else resolve(Number(process.hrtime.bigint() - started) / 1e6);
    });
  });
}

async function median(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  await once(cmd, args, env); // warm the file cache
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) times.push(await once(cmd, args, env));
  times.sort((x, y) => x - y);
  return times[Math.floor(times.length / 2)];
}

export async function benchCli(log: (line: string) => void): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-cli-'));
  const t = await startTestBroker({ database: 'sqlite' });
  try {
    const build = await buildCli(path.join(work, 'dist'));
    const prefix = path.join(work, 'prefix');
    fs.mkdirSync(prefix);
    await once('tar', ['-xzf', build.tarball, '-C', prefix], process.env);
    const fleet = path.join(prefix, 'bin', 'fleet');
    for (let i = 0; i < 5; i++) await t.addDevice({ name: `bench-${i}` });
    const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
    const env = { ...rest, XDG_CONFIG_HOME: path.join(work, 'config'), FLEET_URL: t.url, FLEET_TOKEN: await t.login(ADMIN.email, ADMIN.password) };

    // The broker's own share of `fleet devices`: the same call made from here, without a process start.
    const apiCall = async () => {
      const started = process.hrtime.bigint();
      const res = await fetch(`${t.url}/api/v2/grouptree`, { headers: { authorization: `Bearer ${env.FLEET_TOKEN}` } });
      await res.text();
      if (res.status !== 200) throw new Error(`GET /grouptree answered ${res.status}`);
      return Number(process.hrtime.bigint() - started) / 1e6;
    };
    await apiCall();
    const calls: number[] = [];
    for (let i = 0; i < RUNS; i++) calls.push(await apiCall());
    calls.sort((x, y) => x - y);
    const call = calls[Math.floor(calls.length / 2)];

    const node = await median(process.execPath, ['-e', '0'], env);
    const help = await median(fleet, ['--help'], env);
    const devices = await median(fleet, ['devices'], env);
    // The floor for any Node.js client making that call: node itself, one http.get, nothing else.
    const getScript = `require('node:http').get(process.env.FLEET_URL + '/api/v2/grouptree', { headers: { authorization: 'Bearer ' + process.env.FLEET_TOKEN } }, (r) => r.resume().on('end', () => process.exit(r.statusCode === 200 ? 0 : 1)))`;
    const bareGet = await median(process.execPath, ['-e', getScript], env);
    log(`node -e 0: ${node.toFixed(0)} ms (median of ${RUNS})`);
    log(`fleet --help: ${help.toFixed(0)} ms = ${(help / node).toFixed(2)}× node (target ≤ 1.5×)`);
    log(`fleet devices: ${devices.toFixed(0)} ms = ${(devices / node).toFixed(2)}× node (target ≤ 1.5×; includes one API call)`);
    log(`GET /grouptree alone, from a running process: ${call.toFixed(1)} ms; fleet devices without it: ${((devices - call) / node).toFixed(2)}× node`);
    log(
      `node -e "http.get(/grouptree)": ${bareGet.toFixed(0)} ms = ${(bareGet / node).toFixed(2)}× node; fleet devices = ${(devices / bareGet).toFixed(2)}× that`,
    );
  } finally {
    await t.close();
    fs.rmSync(work, { recursive: true, force: true });
  }
}
