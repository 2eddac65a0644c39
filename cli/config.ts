import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CliError } from './errors.js';

/** One sign-in: a profile. */
export interface Credentials {
  url: string;
  token: string;
  /** The refresh token of the sign-in session, to renew the short-lived access token. */
  refresh_token?: string;
  email?: string;
  /** When the sign-in session ends (ISO 8601), as the broker said at sign-in. */
  session_expires_at?: string;
  /** The profile's name (the key it is stored under). */
  name?: string;
}

/** What credentials.json holds: the profiles and the one in use. */
export interface Profiles {
  current?: string;
  profiles: Record<string, Credentials>;
}

/** `$XDG_CONFIG_HOME/fleet`, or `~/.config/fleet`. */
export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(os.homedir(), '.config');
  return path.join(base, 'fleet');
}

export function credentialsFile(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(configDir(env), 'credentials.json');
}

const isCredentials = (v: unknown): v is Credentials =>
  !!v && typeof v === 'object' && typeof (v as Credentials).url === 'string' && typeof (v as Credentials).token === 'string';

/** A profile name: what `fleet use` takes (letters, digits, . _ -). */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * The stored profiles. A file of the single sign-in of earlier versions (`{url, token, ...}`) reads
 * as one profile named after its host, and is rewritten in the new form.
 */
export function readProfiles(env: NodeJS.ProcessEnv = process.env): Profiles {
  const file = credentialsFile(env);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return { profiles: {} };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (isCredentials(parsed)) {
    const name = profileNameFor(parsed.url, {});
    const migrated: Profiles = { current: name, profiles: { [name]: { ...parsed, name: undefined } } };
    try {
      writeProfiles(migrated, env);
    } catch {
      // read-only config: keep using it as it is
    }
    return withNames(migrated);
  }
  const p = parsed as Partial<Profiles> | undefined;
  if (p && typeof p === 'object' && p.profiles && typeof p.profiles === 'object' && Object.values(p.profiles).every(isCredentials))
    return withNames({ current: typeof p.current === 'string' ? p.current : undefined, profiles: p.profiles });
  throw new CliError(`${file} is not readable credentials; sign in again with "fleet login".`);
}

function withNames(p: Profiles): Profiles {
  for (const [name, c] of Object.entries(p.profiles)) c.name = name;
  return p;
}

/** Written readable by the user only (0600, directory 0700), replaced atomically. */
function writeProfiles(p: Profiles, env: NodeJS.ProcessEnv = process.env): string {
  const dir = configDir(env);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = credentialsFile(env);
  const temp = `${file}.${process.pid}.tmp`;
  const profiles = Object.fromEntries(Object.entries(p.profiles).map(([name, c]) => [name, { ...c, name: undefined }]));
  fs.writeFileSync(temp, `${JSON.stringify({ current: p.current, profiles }, null, 2)}\n`, { mode: 0o600 });
  fs.chmodSync(temp, 0o600);
  fs.renameSync(temp, file);
  return file;
}

/** A name for a new profile of `url`: its host name, with the port when that name is taken by another broker. */
export function profileNameFor(url: string, profiles: Record<string, Credentials>): string {
  const u = new URL(url);
  const candidates = [u.hostname, `${u.hostname}-${u.port || (u.protocol === 'https:' ? '443' : '80')}`].map((n) =>
    n.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, ''),
  );
  for (const n of candidates) if (n && (!profiles[n] || profiles[n].url === url)) return n;
  for (let i = 2; ; i++) if (!profiles[`${candidates[0]}-${i}`]) return `${candidates[0]}-${i}`;
}

/** The profile in use (by `fleet use`), if any. */
export function readCredentials(env: NodeJS.ProcessEnv = process.env): Credentials | undefined {
  const p = readProfiles(env);
  return p.current ? p.profiles[p.current] : undefined;
}

/**
 * Saves a sign-in as a profile and makes it the one in use: under `credentials.name`, else the
 * profile of the same URL, else a new one named after the host. Returns the file and the name.
 */
export function writeCredentials(credentials: Credentials, env: NodeJS.ProcessEnv = process.env, options: { use?: boolean } = {}): string {
  const p = readProfiles(env);
  let name = credentials.name;
  if (name !== undefined && !NAME.test(name)) throw new CliError(`"${name}" is not a profile name (letters, digits, ".", "_" and "-").`);
  name ??= Object.values(p.profiles).find((c) => c.url === credentials.url)?.name ?? profileNameFor(credentials.url, p.profiles);
  p.profiles[name] = { ...credentials, name };
  if (options.use !== false) p.current = name;
  credentials.name = name;
  return writeProfiles(p, env);
}

/** Forgets a profile (the one in use by default); another one becomes the one in use. */
export function removeCredentials(env: NodeJS.ProcessEnv = process.env, name?: string): void {
  const p = readProfiles(env);
  const gone = name ?? p.current;
  if (!gone || !p.profiles[gone]) return;
  delete p.profiles[gone];
  if (p.current === gone) p.current = Object.keys(p.profiles).sort()[0];
  if (Object.keys(p.profiles).length === 0) fs.rmSync(credentialsFile(env), { force: true });
  else writeProfiles(p, env);
}

/** `fleet use <name>`: the profile in use from now on. */
export function useProfile(name: string, env: NodeJS.ProcessEnv = process.env): Credentials {
  const p = readProfiles(env);
  const found = p.profiles[name] ?? Object.values(p.profiles).find((c) => sameBroker(c.url, name));
  if (!found?.name) {
    const known = Object.keys(p.profiles).sort();
    throw new CliError(`No profile "${name}"${known.length ? ` (profiles: ${known.join(', ')})` : ''}: sign in with "fleet login --url <broker>".`);
  }
  p.current = found.name;
  writeProfiles(p, env);
  return found;
}

function sameBroker(url: string, given: string): boolean {
  try {
    return normalizeUrl(given) === url;
  } catch {
    return false;
  }
}

export interface Target {
  url: string;
  token: string;
  /** Stored credentials can be renewed and saved back; FLEET_TOKEN cannot. */
  stored?: Credentials;
}

/**
 * The broker and token of a command: FLEET_URL (a URL or a profile name) picks the profile for this
 * call, else the profile in use; FLEET_TOKEN, for scripts, replaces the stored token.
 */
export function resolveTarget(env: NodeJS.ProcessEnv = process.env): Target {
  const p = readProfiles(env);
  let stored: Credentials | undefined;
  let url: string | undefined;
  if (env.FLEET_URL) {
    stored = p.profiles[env.FLEET_URL];
    url = stored?.url ?? normalizeUrl(env.FLEET_URL);
    stored ??= Object.values(p.profiles).find((c) => c.url === url);
  } else {
    stored = p.current ? p.profiles[p.current] : undefined;
    url = stored?.url;
  }
  if (!url) throw new CliError('No broker: sign in with "fleet login --url <broker> --email <email>", or set FLEET_URL and FLEET_TOKEN.');
  if (env.FLEET_TOKEN) return { url, token: env.FLEET_TOKEN };
  if (!stored) throw new CliError(`Not signed in to ${url}: run "fleet login --url ${url}", or set FLEET_TOKEN.`);
  return { url, token: stored.token, stored };
}

const LOCAL = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/**
 * A broker URL as users write it: `https://host[:port]`, or `host[:port]` (https assumed; http for
 * localhost and 127.x), a pasted `/api/v2` (or `/api`) suffix and trailing slashes dropped.
 */
export function normalizeUrl(url: string): string {
  let given = url.trim();
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(given)) {
    const host = given.split(/[/?#]/)[0].replace(/:\d*$/, '');
    given = `${LOCAL.test(host) ? 'http' : 'https'}://${given}`;
  }
  let parsed: URL;
  try {
    parsed = new URL(given);
  } catch {
    throw new CliError(`"${url}" is not a URL (e.g. https://fleet.example.com).`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new CliError(`"${url}" must start with http:// or https://.`);
  if (!parsed.hostname) throw new CliError(`"${url}" names no host (e.g. https://fleet.example.com).`);
  const pathname = parsed.pathname
    .replace(/\/+$/, '')
    .replace(/\/api(\/v2)?$/i, '')
    .replace(/\/+$/, '');
  return `${parsed.protocol}//${parsed.host}${pathname}`;
}
