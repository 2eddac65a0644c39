import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { ensurePrivateDir } from './data-dir.js';
import { BUNDLED, SOURCE_ROOT } from './paths.js';
import { isLoopback } from '../agent/broker-client.js';
import { BOOTSTRAP_KEY_ENV } from '../agent/options.js';
import type { Services } from './services.js';

const LOCAL_KEY_SETTING = 'local_agent_bootstrap_key_id';

/**
 * `npm start -- --with-agent`: runs an agent for this machine beside the broker, enrolled through an
 * auto-accepting bootstrap key kept for it, so a first start has a device to open a console on.
 */
export async function startLocalAgent(services: Pick<Services, 'settings' | 'enrol' | 'config'>, brokerUrl: string, logger: Logger): Promise<ChildProcess> {
  let keyId = await services.settings.get<string>(LOCAL_KEY_SETTING);
  let key: string | undefined;
  if (keyId) {
    try {
      key = (await services.enrol.getKey(keyId)).key;
    } catch {
      key = undefined; // deleted by an operator: make a new one
    }
  }
  if (!key) {
    const record = await services.enrol.createKey({ auto_accept: true }, null);
    key = record.key;
    keyId = record.key_id;
    await services.settings.set(LOCAL_KEY_SETTING, keyId);
  }
  const stateDir = path.join(services.config.dataDir, 'agent');
  ensurePrivateDir(stateDir, logger);
  const command = localAgentCommand(
    brokerUrl,
    stateDir,
    key,
    process.env,
    BUNDLED ? path.join(services.config.agentArtifactsDir, 'fleet-agent.mjs') : undefined,
  );
  const child = spawn(process.execPath, command.args, { stdio: ['ignore', 'inherit', 'inherit'], env: command.env });
  child.on('exit', (code, signal) => logger.warn({ code, signal }, 'local agent exited'));
  logger.info({ stateDir, pid: child.pid }, 'local agent started (--with-agent)');
  return child;
}

/**
 * How the local agent is started: from source through tsx, or (the broker build) the bundled agent
 * `bundle` (`npm run build:agent`) with node alone. The key goes by environment, not argv: every
 * user can read a command line (`ps`). A broker listening on a non-loopback address over http is still
 * this machine: the local agent is told so (--insecure-http), the traffic never leaves the host.
 */
export function localAgentCommand(
  brokerUrl: string,
  stateDir: string,
  key: string,
  env: NodeJS.ProcessEnv,
  bundle?: string,
): { args: string[]; env: NodeJS.ProcessEnv } {
  if (bundle && !fs.existsSync(bundle)) throw new Error(`--with-agent needs the agent build ${bundle}: run \`npm run build:agent\` first`);
  const program = bundle ? [bundle] : [path.join(SOURCE_ROOT, 'node_modules', 'tsx', 'dist', 'cli.mjs'), path.join(SOURCE_ROOT, 'agent', 'main.ts')];
  const url = new URL(brokerUrl);
  const sameHostHttp = url.protocol === 'http:' && !isLoopback(url);
  return {
    args: [...program, '--broker', brokerUrl, '--state-dir', stateDir, ...(sameHostHttp ? ['--insecure-http'] : [])],
    env: { ...env, [BOOTSTRAP_KEY_ENV]: key },
  };
}
