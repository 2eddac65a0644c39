/**
 * The configuration the agent keeps in its state directory: the last one the broker sent, with the
 * device attributes and account defaults that came with it, so a restarted or offline agent still
 * applies it. Written to a temporary file created exclusively (0600), synced, then renamed over the
 * kept one: a crash leaves the old configuration or the new, never half of one.
 */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { checkConfig, type StoredConfig } from './received.js';

const STATE_FILE = 'config.json';

/** The kept configuration, checked as one from the broker; undefined when none is kept. Throws when it is unreadable. */
export async function loadKeptConfig(stateDir: string): Promise<StoredConfig | undefined> {
  let text: string;
  try {
    text = await fs.readFile(path.join(stateDir, STATE_FILE), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const stored = JSON.parse(text) as { config?: unknown; attributes?: unknown; defaults?: unknown };
  return checkConfig(stored.config, stored.attributes, stored.defaults);
}

/** Keeps this configuration in place of the one kept before. */
export async function keepConfig(stateDir: string, stored: StoredConfig): Promise<void> {
  await fs.mkdir(stateDir, { recursive: true, mode: 0o700 });
  const target = path.join(stateDir, STATE_FILE);
  const temp = `${target}.${crypto.randomBytes(6).toString('hex')}.tmp`;
  const handle = await fs.open(temp, 'wx', 0o600);
  try {
    await handle.writeFile(JSON.stringify({ config: stored.config, attributes: stored.attributes, defaults: stored.defaults }));
    await handle.sync();
    await handle.close();
    await fs.rename(temp, target);
  } catch (err) {
    await handle.close().catch(() => {});
    await fs.rm(temp, { force: true });
    throw err;
  }
}

/** Forgets the kept configuration (a new device identity must not apply the old one's). */
export async function discardKeptConfig(stateDir: string): Promise<void> {
  await fs.rm(path.join(stateDir, STATE_FILE), { force: true });
}
