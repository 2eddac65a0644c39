/**
 * Test helper: a fake `docker` / `podman` executable (a node script) that keeps its containers in a state
 * directory and logs every argv, printing `container ls` the way the real tool does (docker: one JSON
 * object per line with labels as `k=v,…`; podman: one JSON array with a labels object). Used where the real
 * runtime cannot run here (docker has no daemon on the test machine) and to drive a container through
 * exit and reconfiguration.
 */
import { mkdir, readFile, writeFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { writeFakeTool } from './test-context.js';

const SCRIPT = String.raw`#!/usr/bin/env node
const fs = require('fs');
const path = require('path');
const state = process.env.FAKE_RUNTIME_STATE;
const style = process.env.FAKE_RUNTIME_STYLE;
const args = process.argv.slice(2);
fs.appendFileSync(path.join(state, 'log'), JSON.stringify(args) + '\n');
const dir = path.join(state, 'containers');
fs.mkdirSync(dir, { recursive: true });
const load = () => fs.readdirSync(dir).map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')));
const save = (c) => fs.writeFileSync(path.join(dir, c.name + '.json'), JSON.stringify(c));
const byId = (id) => load().find((c) => c.id === id);
const cmd = args[0];
if (cmd === 'container' && args[1] === 'ls') {
  const filter = args[args.indexOf('--filter') + 1].slice('label='.length);
  const at = filter.indexOf('=');
  const found = load().filter((c) => c.labels[filter.slice(0, at)] === filter.slice(at + 1));
  if (style === 'podman') console.log(JSON.stringify(found.map((c) => ({ Id: c.id, State: c.state, Labels: c.labels, Names: [c.name] }))));
  else for (const c of found) console.log(JSON.stringify({ ID: c.id, State: c.state, Labels: Object.entries(c.labels).map(([k, v]) => k + '=' + v).join(','), Names: c.name }));
} else if (cmd === 'run') {
  if (process.env.FAKE_RUN_FAIL) { console.error('Error: ' + process.env.FAKE_RUN_FAIL); process.exit(125); }
  const labels = {};
  let name = '';
  for (let i = 1; i < args.length; i++) {
    if (args[i] === '--label') { const [k, ...v] = args[++i].split('='); labels[k] = v.join('='); }
    else if (args[i] === '--name') name = args[++i];
  }
  const id = 'id' + fs.readFileSync(path.join(state, 'log'), 'utf8').split('\n').length;
  save({ id, name, labels, state: 'running', args });
  console.log(id);
} else if (cmd === 'kill') {
  const c = byId(args[1]);
  if (!c || c.state !== 'running') { console.error('Error: container not running'); process.exit(1); }
  c.state = 'exited'; save(c);
} else if (cmd === 'rm') {
  const c = byId(args[args.length - 1]);
  if (!c) { console.error('Error: no such container'); process.exit(1); }
  fs.unlinkSync(path.join(dir, c.name + '.json'));
} else if (cmd === 'login') {
  const username = args[args.indexOf('--username') + 1];
  const server = args[args.length - 1];
  const password = fs.readFileSync(0, 'utf8');
  if (password === 'wrong') { console.error('Error: unauthorized: ' + username + ':' + password); process.exit(1); }
  const file = process.env.FAKE_AUTH_FILE;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const auths = {}; auths[server] = { auth: Buffer.from(username + ':' + password).toString('base64') };
  fs.writeFileSync(file, JSON.stringify({ auths }));
  console.log('Login Succeeded!');
} else { console.error('fake runtime: unsupported ' + args.join(' ')); process.exit(2); }
`;

export interface FakeRuntime {
  binDir: string;
  env: Record<string, string>;
  /** argv lists the runtime got (without its own name) */
  log(): Promise<string[][]>;
  containers(): Promise<Array<{ id: string; name: string; state: string; labels: Record<string, string>; args: string[] }>>;
  /** makes a container exit, as if its process ended */
  exit(name: string): Promise<void>;
}

export async function installFakeRuntime(baseDir: string, runtime: 'docker' | 'podman', authFile: string): Promise<FakeRuntime> {
  const binDir = path.join(baseDir, 'bin');
  const state = path.join(baseDir, 'state');
  await mkdir(path.join(state, 'containers'), { recursive: true });
  await writeFile(path.join(state, 'log'), '');
  await writeFakeTool(binDir, runtime, SCRIPT);
  const containersDir = path.join(state, 'containers');
  const fake: FakeRuntime = {
    binDir,
    env: { FAKE_RUNTIME_STATE: state, FAKE_RUNTIME_STYLE: runtime, FAKE_AUTH_FILE: authFile },
    async log() {
      return (await readFile(path.join(state, 'log'), 'utf8'))
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as string[]);
    },
    async containers() {
      const names = await readdir(containersDir);
      return Promise.all(
        names.map(async (n) => JSON.parse(await readFile(path.join(containersDir, n), 'utf8')) as Awaited<ReturnType<FakeRuntime['containers']>>[number]),
      );
    },
    async exit(name) {
      const file = path.join(containersDir, `${name}.json`);
      const c = JSON.parse(await readFile(file, 'utf8')) as { state: string };
      c.state = 'exited';
      await writeFile(file, JSON.stringify(c));
    },
  };
  return fake;
}
