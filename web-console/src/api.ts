/**
 * The console's only way to the broker: adds the bearer token, renews it before it expires (and
 * once more on a 401 `token_expired`), and turns every failure into an ApiFailure carrying the
 * API's own message, so a screen can always say what went wrong.
 */

export const API = '/api/v2';

/** A refused or failed call, in the API's error shape `{code, error, message, ...details}`. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly body: Record<string, unknown> = {},
  ) {
    super(message);
  }

  /** Field errors of a 400 answer, by field path (`latitude`, `custom.mykey`, `policies.0`). */
  fieldErrors(): Record<string, string> {
    const out: Record<string, string> = {};
    const issues = Array.isArray(this.body.issues) ? (this.body.issues as { field?: unknown; message?: unknown }[]) : [];
    for (const issue of issues) {
      if (typeof issue.field !== 'string') continue;
      // Issues name the part of the request first: `body.latitude` → `latitude`.
      const field = issue.field.replace(/^(body|query|params)\./, '');
      out[field] ??= String(issue.message ?? this.message);
    }
    if (typeof this.body.field === 'string' && !(this.body.field in out)) out[this.body.field] = this.message;
    return out;
  }
}

export type Query = Record<string, string | number | boolean | undefined | null>;

const TOKEN_KEY = 'fleet.token';
// Not a secret: tells a fresh tab that a refresh cookie may exist, so it tries to renew
// instead of showing the sign-in form (and avoids a pointless 401 when there is none).
const SESSION_HINT_KEY = 'fleet.session';

const session = () => sessionStorage;
const local = () => localStorage;

let token: string | null = readStorage(session, TOKEN_KEY);
let renewTimer: ReturnType<typeof setTimeout> | undefined;
let renewing: Promise<boolean> | null = null;
const signedOutListeners = new Set<(message: string) => void>();

function readStorage(store: () => Storage, key: string): string | null {
  try {
    return store().getItem(key);
  } catch {
    return null;
  }
}

function writeStorage(store: () => Storage, key: string, value: string | null): void {
  try {
    if (value === null) store().removeItem(key);
    else store().setItem(key, value);
  } catch {
    // Storage may be disabled (private mode, or absent outside a browser); the token then lives in memory only.
  }
}

/** Seconds since the epoch at which a JWT expires, or null when unreadable. */
export function tokenExpiry(jwt: string): number | null {
  try {
    const part = jwt.split('.')[1];
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/'));
    const exp = (JSON.parse(json) as { exp?: unknown }).exp;
    return typeof exp === 'number' ? exp : null;
  } catch {
    return null;
  }
}

export function currentToken(): string | null {
  return token;
}

export function hasSessionHint(): boolean {
  return readStorage(local, SESSION_HINT_KEY) === '1';
}

/** Keeps a new token and plans its renewal a little before it expires. */
export function setToken(value: string | null): void {
  token = value;
  writeStorage(session, TOKEN_KEY, value);
  writeStorage(local, SESSION_HINT_KEY, value ? '1' : null);
  clearTimeout(renewTimer);
  if (!value) return;
  const exp = tokenExpiry(value);
  if (exp === null) return;
  const lifetime = exp * 1000 - Date.now();
  // Renew when 80% of the lifetime has passed, at least 5 s before the end.
  const delay = Math.max(1000, Math.min(lifetime * 0.8, lifetime - 5000));
  renewTimer = setTimeout(() => void renew(), delay);
}

/** Called when the session ends underneath us (revoked, user disabled, renewal refused). */
export function onSignedOut(listener: (message: string) => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

function signedOut(message: string): void {
  setToken(null);
  for (const listener of signedOutListeners) listener(message);
}

async function postRefresh(bearer?: string): Promise<string | null> {
  const res = await fetch(`${API}/refresh-jwt`, {
    method: 'POST',
    credentials: 'same-origin',
    headers: bearer ? { authorization: `Bearer ${bearer}` } : {},
  });
  if (!res.ok) return null;
  const body = (await res.json().catch(() => ({}))) as { token?: string };
  return res.headers.get('Refreshed-Token') ?? body.token ?? null;
}

/**
 * Renews the token: with the refresh cookie set at sign-in, else with the still-valid bearer.
 * One renewal at a time; answers whether a token is now held.
 */
export function renew(): Promise<boolean> {
  renewing ??= (async () => {
    try {
      const held = token;
      const exp = held ? tokenExpiry(held) : null;
      let fresh = await postRefresh();
      if (!fresh && held && exp !== null && exp * 1000 > Date.now() + 2000) fresh = await postRefresh(held);
      if (fresh) setToken(fresh);
      return Boolean(fresh);
    } catch {
      return false;
    } finally {
      renewing = null;
    }
  })();
  return renewing;
}

/** Makes sure the token has at least a minute left (before uploads and WebSocket tickets). */
export async function ensureFreshToken(): Promise<void> {
  const exp = token ? tokenExpiry(token) : null;
  if (token && exp !== null && exp * 1000 - Date.now() > 60_000) return;
  if (!(await renew())) {
    signedOut('Your session has ended; sign in again.');
    throw new ApiFailure(401, 'token_expired', 'Your session has ended; sign in again.');
  }
}

export function apiUrl(path: string, query?: Query): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== '') params.set(key, String(value));
  }
  const qs = params.toString();
  return `${API}${path}${qs ? `?${qs}` : ''}`;
}

/** Turns any non-2xx answer into an ApiFailure with the API's message (or a plain one). */
export async function failureFrom(res: Response): Promise<ApiFailure> {
  const text = await res.text().catch(() => '');
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // Not the API's JSON (a proxy page, an empty body): describe the status instead.
  }
  const message =
    typeof body.message === 'string' && body.message ? body.message : `The broker answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''}.`;
  return new ApiFailure(res.status, typeof body.error === 'string' ? body.error : `http_${res.status}`, message, body);
}

const SESSION_ENDED = new Set(['token_revoked', 'invalid_token', 'user_disabled', 'unauthorized']);

interface RequestOptions {
  query?: Query;
  body?: unknown;
  /** Calls made before sign-in (login, 2FA) carry no token and do not end the session on 401. */
  anonymous?: boolean;
}

async function send(method: string, path: string, options: RequestOptions): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (!options.anonymous && token) headers.authorization = `Bearer ${token}`;
  let body: BodyInit | undefined;
  if (options.body instanceof FormData) body = options.body;
  else if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  try {
    return await fetch(apiUrl(path, options.query), { method, headers, body, credentials: 'same-origin' });
  } catch {
    throw new ApiFailure(0, 'network_error', 'The broker could not be reached. Check the connection and try again.');
  }
}

/** One API call; resolves to the parsed JSON body (undefined for 204), rejects with ApiFailure. */
export async function request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
  let res = await send(method, path, options);
  if (res.status === 401 && !options.anonymous) {
    const failure = await failureFrom(res);
    if (failure.error === 'token_expired' && (await renew())) {
      res = await send(method, path, options);
    } else {
      if (SESSION_ENDED.has(failure.error) || failure.error === 'token_expired') signedOut(failure.message);
      throw failure;
    }
  }
  if (!res.ok) throw await failureFrom(res);
  if (res.status === 204) return undefined as T;
  const type = res.headers.get('content-type') ?? '';
  if (type.includes('json')) return (await res.json()) as T;
  return (await res.text()) as T;
}

export const api = {
  get: <T = unknown>(path: string, query?: Query) => request<T>('GET', path, { query }),
  post: <T = unknown>(path: string, body?: unknown, query?: Query) => request<T>('POST', path, { body: body ?? {}, query }),
  put: <T = unknown>(path: string, body?: unknown) => request<T>('PUT', path, { body: body ?? {} }),
  patch: <T = unknown>(path: string, body?: unknown) => request<T>('PATCH', path, { body: body ?? {} }),
  del: <T = unknown>(path: string, query?: Query, body?: unknown) => request<T>('DELETE', path, { query, body }),
};

/** A list answer `{items, total}`; tolerates a bare array. */
export function itemsOf<T>(answer: unknown): T[] {
  if (Array.isArray(answer)) return answer as T[];
  if (answer && typeof answer === 'object' && Array.isArray((answer as { items?: unknown }).items)) return (answer as { items: T[] }).items;
  return [];
}

/** Message of anything thrown, for display. */
export function messageOf(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/** Downloads an API resource as a file (with the bearer token, so not through a plain link). */
export async function downloadFile(path: string, query: Query, filename: string): Promise<void> {
  await ensureFreshToken();
  let res: Response;
  try {
    res = await fetch(apiUrl(path, query), { headers: { authorization: `Bearer ${token}` } });
  } catch {
    throw new ApiFailure(0, 'network_error', 'The broker could not be reached.');
  }
  if (!res.ok) throw await failureFrom(res);
  saveBlob(await res.blob(), filename);
}

export function saveBlob(blob: Blob, filename: string): void {
  // Chromium adds an extension it guesses from the type (`hostname` → `hostname.txt` for text it
  // sniffs); as plain bytes the file keeps exactly the name it has.
  const url = URL.createObjectURL(new Blob([blob], { type: 'application/octet-stream' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * Uploads multipart form data with progress (fetch cannot report upload progress; XHR can).
 * `onProgress` gets (sent, total) bytes.
 */
export async function uploadForm<T = unknown>(
  path: string,
  form: FormData,
  onProgress: (sent: number, total: number) => void,
  signal?: AbortSignal,
): Promise<T> {
  await ensureFreshToken();
  return new Promise<T>((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', apiUrl(path));
    xhr.setRequestHeader('authorization', `Bearer ${token}`);
    xhr.setRequestHeader('accept', 'application/json');
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : 0);
    xhr.onerror = () => reject(new ApiFailure(0, 'network_error', 'The upload was interrupted: the broker could not be reached.'));
    xhr.onabort = () => reject(new ApiFailure(0, 'aborted', 'The upload was cancelled.'));
    xhr.onload = () => {
      const res = new Response(xhr.status === 204 ? null : xhr.responseText, {
        status: xhr.status,
        statusText: xhr.statusText,
        headers: { 'content-type': xhr.getResponseHeader('content-type') ?? '' },
      });
      if (res.ok) {
        res
          .json()
          .then((body) => resolve(body as T))
          .catch(() => resolve(undefined as T));
      } else {
        void failureFrom(res).then(reject);
      }
    };
    signal?.addEventListener('abort', () => xhr.abort());
    xhr.send(form);
  });
}

/**
 * URL of a remote-access WebSocket. Browsers cannot set headers on a WebSocket, so the URL
 * carries a single-use ticket bound to this session (POST /remote/ticket).
 */
export async function remoteSocketUrl(endpoint: 'console' | 'tunnel' | 'copy', query: Query): Promise<string> {
  await ensureFreshToken();
  const { ticket } = await api.post<{ ticket: string }>('/remote/ticket', {});
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${location.host}${apiUrl(`/remote/${endpoint}`, { ...query, ticket })}`;
}

/** Signs out: revokes the token on the broker (best effort) and forgets it here. */
export async function signOut(): Promise<void> {
  try {
    if (token) await request('POST', '/logout');
  } catch {
    // Already revoked or unreachable: forgetting it locally is what matters.
  }
  setToken(null);
}
