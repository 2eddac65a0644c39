import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { ensurePrivateDir } from './data-dir.js';
import { BOOTSTRAP_KEY_ENV } from '../agent/config.js';
import type { Services } from './services.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
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
  const command = localAgentCommand(brokerUrl, stateDir, key, process.env);
  const child = spawn(process.execPath, command.args, { stdio: ['ignore', 'inherit', 'inherit'], env: command.env });
  child.on('exit', (code, signal) => logger.warn({ code, signal }, 'local agent exited'));
  logger.info({ stateDir, pid: child.pid }, 'local agent started (--with-agent)');
  return child;
}

/** How the local agent is started. The key goes by environment, not argv: every user can read a command line (`ps`). */
export function localAgentCommand(brokerUrl: string, stateDir: string, key: string, env: NodeJS.ProcessEnv): { args: string[]; env: NodeJS.ProcessEnv } {
  const tsx = path.join(ROOT, 'node_modules', 'tsx', 'dist', 'cli.mjs');
  return {
    args: [tsx, path.join(ROOT, 'agent', 'main.ts'), '--broker', brokerUrl, '--state-dir', stateDir],
    env: { ...env, [BOOTSTRAP_KEY_ENV]: key },
  };
}
