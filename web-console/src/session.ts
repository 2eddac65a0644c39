/**
 * Who is signed in and what they may do. The profile (GET /profile) carries the user's
 * permissions; the UI offers only what they allow (see areas.ts), and the API stays the judge.
 */
import { useEffect, useState } from 'preact/hooks';
import type { Profile as ApiProfile } from '../../shared/api-types.js';
import { api, ApiFailure, currentToken, hasSessionHint, onSignedOut, renew, setToken, signOut as apiSignOut } from './api.js';

/** GET /profile (shared/api-types.ts); partial while only the email of a fresh sign-in is known. */
export type Profile = Partial<ApiProfile>;

export interface SessionState {
  status: 'starting' | 'signed-out' | 'signed-in';
  profile: Profile | null;
  /** Permission names held (with any resource); null when the broker did not say (then all is offered). */
  permissions: Set<string> | null;
  /** Why the user was signed out, shown on the sign-in form. */
  notice?: string;
  /** Where to go after sign-in. */
  returnTo?: string;
}

let state: SessionState = { status: 'starting', profile: null, permissions: null };
const listeners = new Set<(s: SessionState) => void>();

function update(next: Partial<SessionState>): void {
  state = { ...state, ...next };
  for (const listener of listeners) listener(state);
}

export function getSession(): SessionState {
  return state;
}

export function useSession(): SessionState {
  const [value, setValue] = useState(state);
  useEffect(() => {
    listeners.add(setValue);
    setValue(state);
    return () => void listeners.delete(setValue);
  }, []);
  return value;
}

/** Permission names from the profile, whichever shape the broker uses for them. */
export function permissionNames(raw: unknown): Set<string> | null {
  if (Array.isArray(raw)) {
    return new Set(
      raw.flatMap((p) => {
        if (typeof p === 'string') return [p];
        if (p && typeof p === 'object' && typeof (p as { permission?: unknown }).permission === 'string') return [(p as { permission: string }).permission];
        return [];
      }),
    );
  }
  if (raw && typeof raw === 'object') return new Set(Object.keys(raw));
  return null;
}

/** Whether the signed-in user holds every one of these permissions. */
export function can(...permissions: string[]): boolean {
  const held = state.permissions;
  if (!held) return state.status === 'signed-in';
  return permissions.every((p) => held.has(p));
}

export async function loadProfile(): Promise<void> {
  try {
    const profile = await api.get<Profile>('/profile');
    update({ status: 'signed-in', profile, permissions: permissionNames(profile.permissions) });
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 401) return; // onSignedOut already handled it
    // Without a profile the console still works: it offers everything and shows the API's refusals.
    update({ status: 'signed-in', profile: state.profile, permissions: null });
  }
}

/** After login or 2FA: keep the token and learn who we are. */
export async function signedIn(token: string, email?: string): Promise<void> {
  setToken(token);
  update({ profile: email ? { email } : null, notice: undefined });
  await loadProfile();
}

export async function signOut(): Promise<void> {
  await apiSignOut();
  update({ status: 'signed-out', profile: null, permissions: null, notice: 'You are signed out.' });
}

/** At start: reuse this tab's token, or renew from the refresh cookie of an earlier sign-in. */
export async function startSession(): Promise<void> {
  onSignedOut((message) => {
    if (state.status === 'signed-out') return;
    update({ status: 'signed-out', profile: null, permissions: null, notice: message, returnTo: here() });
  });
  if (currentToken()) setToken(currentToken()); // plans the renewal
  if (currentToken() || (hasSessionHint() && (await renew()))) {
    await loadProfile();
    if (state.status === 'starting') update({ status: 'signed-out' });
    return;
  }
  update({ status: 'signed-out', returnTo: here() });
}

/** The page to come back to after sign-in; none for the sign-in page itself or the start page. */
function here(): string | undefined {
  return ['/', '/login', '/set-password'].includes(location.pathname) ? undefined : location.pathname + location.search;
}

export function clearReturnTo(): string | undefined {
  const target = state.returnTo;
  state = { ...state, returnTo: undefined };
  return target;
}
