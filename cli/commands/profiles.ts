import type { Profile } from '../../shared/api-types.js';
import { ApiClient } from '../api.js';
import { readProfiles, resolveTarget, useProfile, type Credentials } from '../config.js';
import { CliError } from '../errors.js';

/** When a JWT expires, if it says (without checking its signature: the broker does that). */
function tokenEnd(token: string): Date | undefined {
  try {
    const exp = (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { exp?: unknown }).exp;
    return typeof exp === 'number' ? new Date(exp * 1000) : undefined;
  } catch {
    return undefined;
  }
}

const when = (d: Date) => `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;

function ends(c: Credentials): string {
  if (c.session_expires_at) {
    const at = new Date(c.session_expires_at);
    return at.getTime() > Date.now() ? `session ends ${when(at)}` : `session ended ${when(at)}`;
  }
  const at = tokenEnd(c.token);
  return at ? `token ${at.getTime() > Date.now() ? 'ends' : 'ended'} ${when(at)}${c.refresh_token ? ' (renewed while the session lasts)' : ''}` : '';
}

/**
 * `fleet status`: who (email), where (URL) and until when, for the broker this command would talk
 * to (the profile in use, or FLEET_URL / FLEET_TOKEN), checked with the broker; then the other profiles.
 */
export async function statusCommand(): Promise<void> {
  const profiles = readProfiles();
  const target = resolveTarget();
  let email = target.stored?.email;
  let live = '';
  try {
    const me = await new ApiClient(target).call<Pick<Profile, 'email'>>('GET', '/profile');
    email = me.email ?? email;
    live = 'signed in';
  } catch (err) {
    live = `not usable: ${(err as Error).message}`;
  }
  const source = target.stored ? `profile ${target.stored.name}` : 'FLEET_TOKEN';
  const lines = [
    `${email ?? '(unknown user)'} at ${target.url} (${source}${process.env.FLEET_URL && target.stored ? ', chosen by FLEET_URL' : ''})`,
    `  ${live}${target.stored ? `; ${ends(target.stored)}` : tokenEnd(target.token) ? `; token ends ${when(tokenEnd(target.token) as Date)}` : ''}`,
  ];
  const names = Object.keys(profiles.profiles).sort();
  if (names.length > 1 || (!target.stored && names.length > 0)) {
    lines.push('Profiles (fleet use <name> to switch):');
    for (const name of names) {
      const c = profiles.profiles[name];
      lines.push(`${name === profiles.current ? '*' : ' '} ${name}  ${c.email ?? '-'}  ${c.url}  ${ends(c)}`);
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
  if (live !== 'signed in') throw new CliError(live.replace(/^not usable: /, ''));
}

/** `fleet use <name>`: the profile later commands talk to. */
export async function useCommand(name: string): Promise<void> {
  const c = useProfile(name);
  process.stderr.write(`Using ${c.name}: ${c.email ?? '(unknown user)'} at ${c.url}.\n`);
}
