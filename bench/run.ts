/**
 * `npm run bench`: every benchmark, each printing ratios against a baseline measured in the same run.
 * `npm run bench -- api` runs one group, `npm run bench -- remote latency` (or `ssh scp`) one part of it. Timings are printed, never asserted.
 */
import { benchAgent } from './agent.js';
import { benchAgentTunnel } from './agent-tunnel.js';
import { benchApi } from './api.js';
import { benchCli } from './cli.js';
import { benchCluster } from './cluster.js';
import { benchConfig } from './config.js';
import { benchConsole } from './console.js';
import { benchCve } from './cve.js';
import { benchHostile } from './hostile.js';
import { benchMetrics } from './metrics.js';
import { benchMux } from './mux.js';
import { benchRelay } from './relay.js';
import { benchShared } from './shared.js';
import { benchScale } from './scale.js';

/** `part` narrows a group further (`npm run bench -- remote latency`). */
type Bench = (log: (line: string) => void, part?: string) => Promise<void>;

/** The groups that need node-pty and OpenSSH's pieces load lazily: missing, they print "not available". */
async function load(specifier: string, name: string): Promise<Bench | undefined> {
  try {
    const mod = (await import(specifier)) as Record<string, Bench | undefined>;
    return mod[name];
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const only = process.argv[2];
  const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
  const groups: [string, Bench | undefined][] = [
    ['api', benchApi],
    ['remote', await load('./remote.js', 'benchRemote')],
    ['relay', benchRelay],
    ['ssh', await load('./ssh.js', 'benchSsh')],
    ['hostile', benchHostile],
    ['agent', benchAgent],
    ['agent-tunnel', benchAgentTunnel],
    ['mux', benchMux],
    ['metrics', benchMetrics],
    ['cluster', benchCluster],
    ['config', benchConfig],
    ['shared', benchShared],
    ['cve', benchCve],
    ['scale', benchScale],
    ['cli', benchCli],
    ['console', benchConsole],
  ];
  for (const [name, run] of groups) {
    if (only && only !== name) continue;
    if (!run) {
      log(`${name}: not available`);
      continue;
    }
    log(`== ${name}`);
    await run(log, process.argv[3]);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
