import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CliError } from './errors.js';

export interface Credentials {
  url: string;
  token: string;
  /** The refresh token of the sign-in session, to renew the short-lived access token. */
  refresh_token?: string;
  email?: string;
}

/** `$XDG_CONFIG_HOME/fleet`, or `~/.config/fleet`. */
export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(os.homedir(), '.config');
  return path.join(base, 'fleet');
}

export function credentialsFile(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(configDir(env), 'credentials.json');
}

export function readCredentials(env: NodeJS.ProcessEnv = process.env): Credentials | undefined {
  const file = credentialsFile(env);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  try {
    const parsed = JSON.parse(text) as Partial<Credentials>;
    if (typeof parsed.url === 'string' && typeof parsed.token === 'string') return parsed as Credentials;
  } catch {
    // fall through
  }
  throw new CliError(`${file} is not readable credentials; sign in again with "fleet login".`);
}

/** Written readable by the user only (0600, directory 0700), replaced atomically. */
export function writeCredentials(credentials: Credentials, env: NodeJS.ProcessEnv = process.env): string {
  const dir = configDir(env);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = credentialsFile(env);
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600 });
  fs.chmodSync(temp, 0o600);
  fs.renameSync(temp, file);
  return file;
}

export function removeCredentials(env: NodeJS.ProcessEnv = process.env): void {
  fs.rmSync(credentialsFile(env), { force: true });
}

export interface Target {
  url: string;
  token: string;
  /** Stored credentials can be renewed and saved back; FLEET_TOKEN cannot. */
  stored?: Credentials;
}

/** FLEET_URL and FLEET_TOKEN win over the stored sign-in, for scripts. */
export function resolveTarget(env: NodeJS.ProcessEnv = process.env): Target {
  const stored = readCredentials(env);
  const url = env.FLEET_URL || stored?.url;
  if (!url) throw new CliError('No broker: sign in with "fleet login --url <broker> --email <email>", or set FLEET_URL and FLEET_TOKEN.');
  if (env.FLEET_TOKEN) return { url: normalizeUrl(url), token: env.FLEET_TOKEN };
  if (!stored) throw new CliError('Not signed in: run "fleet login --url <broker> --email <email>", or set FLEET_TOKEN.');
  if (normalizeUrl(stored.url) !== normalizeUrl(url))
    throw new CliError(`Signed in to ${stored.url}, not ${url}: run "fleet login --url ${url}" or set FLEET_TOKEN.`);
  return { url: normalizeUrl(url), token: stored.token, stored };
}

export function normalizeUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliError(`"${url}" is not a URL (e.g. https://fleet.example.com).`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new CliError(`"${url}" must start with http:// or https://.`);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname.replace(/\/+$/, '')}`;
}
