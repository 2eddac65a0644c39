import { answerOf, ApiFailure, refreshTokenFrom, request } from '../api.js';
import { normalizeUrl, readCredentials, removeCredentials, writeCredentials } from '../config.js';
import { CliError } from '../errors.js';
import { prompt, readStdinLine } from '../prompt.js';

export interface LoginOptions {
  url?: string;
  email?: string;
  passwordStdin?: boolean;
  provider?: string;
  code?: string;
}

async function post(url: string, path: string, body: unknown): Promise<Response> {
  return request(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/**
 * `fleet login`: password sign-in, then the second factor when the broker asks for one (choose the
 * provider, enter the code). The token and the refresh token go to the user's config directory,
 * readable by the user only.
 */
export async function login(options: LoginOptions): Promise<void> {
  const given = options.url ?? process.env.FLEET_URL ?? readCredentials()?.url;
  if (!given) throw new CliError('Give the broker: fleet login --url https://fleet.example.com --email you@example.com');
  const url = normalizeUrl(given);
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
  const file = writeCredentials({ url, token: answer.token, refresh_token: refreshTokenFrom(res.headers), email });
  process.stderr.write(`Signed in to ${url} as ${email} (credentials in ${file}).\n`);
}

async function secondFactor(url: string, challenge: string, providers: string[], options: LoginOptions): Promise<Response> {
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

/** `fleet logout`: revokes the stored sign-in and forgets it. */
export async function logout(): Promise<void> {
  const stored = readCredentials();
  if (!stored) {
    process.stderr.write('Not signed in.\n');
    return;
  }
  await request(`${stored.url}/api/v2/logout`, { method: 'POST', headers: { authorization: `Bearer ${stored.token}` } }).catch(() => undefined);
  removeCredentials();
  process.stderr.write(`Signed out of ${stored.url}.\n`);
}
