import type { Profile } from '../../shared/api-types.js';
import { answerOf, ApiFailure, refreshTokenFrom, request, type Answer, type AnswerHeaders } from '../api.js';
import { normalizeUrl, readCredentials, readProfiles, removeCredentials, writeCredentials } from '../config.js';
import { CliError } from '../errors.js';
import { prompt, readStdinLine } from '../prompt.js';
import { certificateAfterLogin } from './ssh-config.js';

export interface LoginOptions {
  url?: string;
  email?: string;
  passwordStdin?: boolean;
  provider?: string;
  code?: string;
  /** the profile's name (default: the broker's host name) */
  name?: string;
}

/** When the sign-in session ends, from the refresh cookie's Max-Age (or Expires). */
function sessionEnd(headers: AnswerHeaders): string | undefined {
  for (const cookie of headers.getSetCookie()) {
    if (!cookie.startsWith('fleet_refresh=')) continue;
    const maxAge = /;\s*max-age=(\d+)/i.exec(cookie)?.[1];
    if (maxAge) return new Date(Date.now() + Number(maxAge) * 1000).toISOString();
    const expires = /;\s*expires=([^;]+)/i.exec(cookie)?.[1];
    if (expires && !Number.isNaN(Date.parse(expires))) return new Date(expires).toISOString();
  }
  return undefined;
}

/** The broker of `fleet login`: --url, else FLEET_URL (a URL or a profile's name), else the profile in use. */
function brokerOf(options: LoginOptions): string | undefined {
  if (options.url) return options.url;
  const env = process.env.FLEET_URL;
  if (env) return readProfiles().profiles[env]?.url ?? env;
  return readCredentials()?.url;
}

async function post(url: string, path: string, body: unknown): Promise<Answer> {
  return request(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/**
 * `fleet login`: with --email, password sign-in, then the second factor when the broker asks for one
 * (choose the provider, enter the code); without, the device authorization flow: the user approves
 * a code in the web console, where they are signed in already. The token and the refresh token go to
 * the user's config directory, readable by the user only.
 */
export async function login(options: LoginOptions): Promise<void> {
  const given = brokerOf(options);
  if (!given) throw new CliError('Give the broker: fleet login --url https://fleet.example.com [--email you@example.com]');
  const url = normalizeUrl(given);
  if (!options.email && !options.passwordStdin) return deviceLogin(url, options.name);
  const email = options.email ?? (await prompt('Email: ', { echo: true, what: 'email' }));
  const password = options.passwordStdin ? await readStdinLine('password') : await prompt(`Password for ${email}: `, { echo: false, what: 'password' });
  if (!password) throw new CliError('No password given.');

  let res = await post(url, '/api/v2/login', { email, password });
  if (res.status === 401) {
    const body = (await res
      .clone()
      .json()
      .catch(() => ({}))) as { error?: string; challenge?: string; providers?: string[] };
    if (body.error === '2fa_required' && body.challenge) res = await secondFactor(url, body.challenge, body.providers ?? ['email'], options);
  }
  let answer: { token: string };
  try {
    answer = await answerOf<{ token: string }>(res);
  } catch (err) {
    if (err instanceof ApiFailure) throw new CliError(`Sign-in failed: ${err.message}`);
    throw err;
  }
  const saved = {
    url,
    token: answer.token,
    refresh_token: refreshTokenFrom(res.headers),
    email,
    session_expires_at: sessionEnd(res.headers),
    name: options.name,
  };
  const file = writeCredentials(saved);
  process.stderr.write(`Signed in to ${url} as ${email} (profile ${saved.name}; credentials in ${file}).\n`);
  await certificateAfterLogin(saved);
}

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

/** The OAuth 2.0 device authorization flow (RFC 8628), as qbee-cli signs in without a user name. */
async function deviceLogin(url: string, name: string | undefined, sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))): Promise<void> {
  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  const started = await answerOf<{ device_code: string; user_code: string; verification_uri: string; expires_in: number; interval: number }>(
    await request(`${url}/oauth2/devicecode`, { method: 'POST', headers: form, body: '' }),
  ).catch((err) => {
    throw new CliError(`Sign-in failed: ${(err as Error).message}`);
  });
  // A broker without PUBLIC_URL names the page by its path only.
  const page = started.verification_uri.startsWith('/') ? `${url}${started.verification_uri}` : started.verification_uri;
  process.stderr.write(
    `To sign in, open ${page}?code=${started.user_code}\nand approve the code ${started.user_code} (check that it is the one shown here).\n`,
  );
  const deadline = Date.now() + started.expires_in * 1000;
  const interval = Math.max(1, started.interval) * 1000;
  while (Date.now() < deadline) {
    await sleep(interval);
    const res = await request(`${url}/oauth2/token`, {
      method: 'POST',
      headers: form,
      body: new URLSearchParams({ grant_type: DEVICE_GRANT, device_code: started.device_code }).toString(),
    });
    if (res.status === 400) {
      const body = (await res.json().catch(() => ({}))) as { error?: string; message?: string };
      if (body.error === 'authorization_pending') continue;
      throw new CliError(`Sign-in failed: ${body.message ?? body.error ?? 'refused'}`);
    }
    const tokens = await answerOf<{ access_token: string; refresh_token: string }>(res).catch((err) => {
      throw new CliError(`Sign-in failed: ${(err as Error).message}`);
    });
    const profile: Partial<Pick<Profile, 'email'>> = await request(`${url}/api/v2/profile`, { headers: { authorization: `Bearer ${tokens.access_token}` } })
      .then((r) => (r.ok ? (r.json() as Promise<Pick<Profile, 'email'>>) : {}))
      .catch(() => ({}));
    const saved = { url, token: tokens.access_token, refresh_token: tokens.refresh_token, email: profile.email, name };
    const file = writeCredentials(saved);
    process.stderr.write(`Signed in to ${url}${profile.email ? ` as ${profile.email}` : ''} (profile ${saved.name}; credentials in ${file}).\n`);
    await certificateAfterLogin(saved);
    return;
  }
  throw new CliError('Sign-in failed: the code expired before it was approved; run fleet login again.');
}

async function secondFactor(url: string, challenge: string, providers: string[], options: LoginOptions): Promise<Answer> {
  try {
    return await askSecondFactor(url, challenge, providers, options);
  } catch (err) {
    // A script piping the password has nothing more on stdin: name the options that answer.
    if (options.passwordStdin && err instanceof CliError && /^No .* on stdin\.$/.test(err.message))
      throw new CliError(
        `The account has a second factor (${providers.join(', ')}): give --provider <${providers.join('|')}> and --code <code>, or the code on the line of stdin after the password.`,
      );
    throw err;
  }
}

async function askSecondFactor(url: string, challenge: string, providers: string[], options: LoginOptions): Promise<Answer> {
  let provider = options.provider;
  if (!provider) {
    const preferred = providers.includes('google') ? 'google' : providers[0];
    provider =
      providers.length === 1
        ? providers[0]
        : (await prompt(`Second factor (${providers.join(', ')}) [${preferred}]: `, { echo: true, what: 'second factor provider' })) || preferred;
  }
  if (!providers.includes(provider)) throw new CliError(`Second factor "${provider}" is not available for this user (${providers.join(', ')}).`);
  const chosen = await answerOf<{ challenge: string }>(await post(url, '/api/v2/challenge-get', { challenge, preferProvider: provider })).catch((err) => {
    throw new CliError(`Second factor failed: ${(err as Error).message}`);
  });
  if (provider === 'email') process.stderr.write('A sign-in code was mailed to you.\n');
  const code =
    options.code ?? (await prompt(provider === 'google' ? 'Code from the authenticator app: ' : 'Code from the mail: ', { echo: true, what: 'code' }));
  return post(url, '/api/v2/challenge-verify', { challenge: chosen.challenge, code });
}

/** `fleet logout`: revokes the sign-in of the profile in use (or the one FLEET_URL picks) and forgets it. */
export async function logout(): Promise<void> {
  const env = process.env.FLEET_URL;
  const profiles = readProfiles();
  const stored = env ? (profiles.profiles[env] ?? Object.values(profiles.profiles).find((c) => c.url === normalizeUrl(env))) : readCredentials();
  if (!stored) {
    process.stderr.write('Not signed in.\n');
    return;
  }
  await request(`${stored.url}/api/v2/logout`, { method: 'POST', headers: { authorization: `Bearer ${stored.token}` } }).catch(() => undefined);
  removeCredentials(process.env, stored.name);
  process.stderr.write(`Signed out of ${stored.url} (profile ${stored.name}).\n`);
}
