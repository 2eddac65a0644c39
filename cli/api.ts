import http from 'node:http';
import { writeCredentials, type Target } from './config.js';
import { CliError } from './errors.js';

const API = '/api/v2';
const REFRESH_COOKIE = 'fleet_refresh';
/** Renew the access token when it has less than this left (it is short-lived). */
const RENEW_MARGIN_SECONDS = 60;

interface ErrorBody {
  code?: number;
  error?: string;
  message?: string;
  [key: string]: unknown;
}

export class ApiFailure extends CliError {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.message ?? `The broker answered ${status}.`);
  }
}

/** Seconds until a JWT expires (without checking its signature: the broker does that). */
function secondsLeft(token: string): number {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { exp?: number };
    return typeof payload.exp === 'number' ? payload.exp - Date.now() / 1000 : Infinity;
  } catch {
    return Infinity;
  }
}

export function refreshTokenFrom(headers: AnswerHeaders): string | undefined {
  for (const cookie of headers.getSetCookie()) {
    const m = new RegExp(`^${REFRESH_COOKIE}=([^;]*)`).exec(cookie);
    if (m && m[1]) return decodeURIComponent(m[1]);
  }
  return undefined;
}

/** The token ran out and cannot be renewed. */
function expired(target: Target): CliError {
  return target.stored
    ? new CliError(`The sign-in to ${target.url} has expired: run "fleet login --url ${target.url}".`)
    : new CliError(`FLEET_TOKEN has expired: run "fleet login --url ${target.url}" (and unset FLEET_TOKEN), or set a fresh token.`);
}

/** The broker's REST API with the caller's token, renewed from the stored sign-in when it runs out. */
export class ApiClient {
  constructor(private readonly target: Target) {}

  get url(): string {
    return this.target.url;
  }

  /** A token good for at least a minute (WebSocket sessions authenticate once, at the start). */
  async token(): Promise<string> {
    if (this.target.stored?.refresh_token && secondsLeft(this.target.token) < RENEW_MARGIN_SECONDS) await this.renew();
    return this.target.token;
  }

  private async renew(): Promise<void> {
    const stored = this.target.stored;
    if (!stored?.refresh_token) throw expired(this.target);
    const res = await request(`${this.url}${API}/refresh-jwt`, {
      method: 'POST',
      headers: { cookie: `${REFRESH_COOKIE}=${encodeURIComponent(stored.refresh_token)}` },
    });
    const body = (await res.json().catch(() => ({}))) as { token?: string; message?: string };
    if (res.status !== 200 || !body.token) throw new CliError(`The sign-in has ended (${body.message ?? res.status}); sign in again with "fleet login".`);
    this.target.token = body.token;
    stored.token = body.token;
    writeCredentials(stored, process.env, { use: false });
  }

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    return answerOf<T>(await this.send(method, path, body));
  }

  /** A GET whose answer is text rather than JSON (a recording); errors as call() throws them. */
  async text(path: string): Promise<string> {
    const res = await this.send('GET', path);
    if (res.status >= 200 && res.status < 300) return res.text();
    return answerOf<never>(res);
  }

  private async send(method: string, path: string, body?: unknown): Promise<Answer> {
    const send = async () =>
      request(`${this.url}${API}${path}`, {
        method,
        headers: { authorization: `Bearer ${await this.token()}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
    let res = await send();
    if (res.status === 401 && this.target.stored?.refresh_token) {
      const answer = (await res
        .clone()
        .json()
        .catch(() => ({}))) as ErrorBody;
      if (answer.error === 'token_expired') {
        await this.renew();
        res = await send();
      }
    } else if (
      res.status === 401 &&
      (
        (await res
          .clone()
          .json()
          .catch(() => ({}))) as ErrorBody
      ).error === 'token_expired'
    ) {
      throw expired(this.target);
    }
    return res;
  }
}

export async function answerOf<T>(res: Answer): Promise<T> {
  const text = await res.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON
  }
  if (res.status >= 200 && res.status < 300) return parsed as T;
  const body: ErrorBody =
    parsed && typeof parsed === 'object' ? (parsed as ErrorBody) : { message: `The broker answered ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}.` };
  throw new ApiFailure(res.status, body);
}

/** A TLS handshake answered by a plain-HTTP server (its answer is not a TLS record). */
const PLAIN_HTTP = /WRONG_VERSION_NUMBER|packet length too long|http request|record layer failure|EPROTO/i;

/** What the CLI reads of an answer (a subset of fetch's Response). */
export interface Answer {
  readonly status: number;
  readonly ok: boolean;
  readonly headers: AnswerHeaders;
  text(): Promise<string>;
  json(): Promise<unknown>;
  clone(): Answer;
}

export interface AnswerHeaders {
  get(name: string): string | null;
  getSetCookie(): string[];
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string;
}

/**
 * One HTTP request through node:http(s), the whole answer read: loading fetch (undici) would add
 * tens of milliseconds to every command's start. Errors are readable when the broker cannot be reached.
 */
export async function request(url: string, init: RequestOptions = {}): Promise<Answer> {
  const target = new URL(url);
  const origin = target.origin;
  try {
    // node:https (and with it TLS) is loaded only for an https broker.
    const send = target.protocol === 'https:' ? (await import('node:https')).request : http.request;
    return await new Promise<Answer>((resolve, reject) => {
      const body = init.body !== undefined ? Buffer.from(init.body) : undefined;
      const req = send(
        target,
        { method: init.method ?? 'GET', headers: { ...init.headers, ...(body ? { 'content-length': String(body.length) } : {}) } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => resolve(answer(res.statusCode ?? 0, res.headers, Buffer.concat(chunks).toString('utf8'))));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (target.protocol === 'https:' && PLAIN_HTTP.test(`${e.code ?? ''} ${e.message ?? ''}`))
      throw new CliError(`This broker speaks http, not https — use ${origin.replace(/^https:/, 'http:')}.`);
    throw new CliError(`Cannot reach the broker at ${origin}: ${e.code ?? e.message ?? String(err)}.`);
  }
}

function answer(status: number, headers: http.IncomingHttpHeaders, text: string): Answer {
  const one = (name: string) => {
    const v = headers[name.toLowerCase()];
    return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
  };
  const result: Answer = {
    status,
    ok: status >= 200 && status < 300,
    headers: { get: one, getSetCookie: () => headers['set-cookie'] ?? [] },
    text: async () => text,
    json: async () => JSON.parse(text) as unknown,
    clone: () => answer(status, headers, text),
  };
  return result;
}
