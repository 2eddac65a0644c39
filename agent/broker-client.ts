/**
 * How the agent reaches the broker: the enrolment call over HTTP(S) and the WebSocket address,
 * with the same TLS settings for both (system CAs, or only the CA file given). The certificate is
 * always verified. Plain http is for a broker on this machine (loopback) or with an explicit
 * insecure flag (brokerUrlPolicy).
 */
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { AGENT_ENROL_PATH, AGENT_WS_PATH } from '../shared/protocol.js';

const ENROL_TIMEOUT_MS = 30_000;

export interface EnrolRequest {
  bootstrap_key: string;
  public_key: string;
  hostname: string;
}

export interface EnrolAnswer {
  device_id: string;
  state: 'pending' | 'approved';
  /** The broker's public signing key (PEM, Ed25519) to pin; absent from a broker before signatures. */
  broker_key?: string;
}

/** A refusal or failure of the enrolment call; `status` is 0 when the broker was not reached. */
export class EnrolError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }

  /** Worth trying again later: the broker was unreachable, busy or failing. */
  get retryable(): boolean {
    return this.status === 0 || this.status === 429 || this.status >= 500;
  }
}

/** Whether a URL's host is this machine: 127.0.0.0/8, ::1 or localhost. */
export function isLoopback(url: URL): boolean {
  const host = url.hostname.toLowerCase();
  return host === 'localhost' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Whether the agent may use this broker URL: https always; http (and so ws) only to a loopback
 * address (a broker's own `--with-agent`, development) or when `insecureHttp` was given explicitly.
 */
export function brokerUrlPolicy(url: URL, insecureHttp: boolean): { ok: true; insecure: boolean } | { ok: false; message: string } {
  if (url.protocol === 'https:') return { ok: true, insecure: false };
  if (url.protocol !== 'http:') return { ok: false, message: `broker must be an https:// URL, got ${url.protocol}` };
  if (isLoopback(url)) return { ok: true, insecure: false };
  if (insecureHttp) return { ok: true, insecure: true };
  return {
    ok: false,
    message:
      `refusing the plain http broker URL ${url.origin}: anyone on the path could read the bootstrap key and pose as the broker. ` +
      'Use https://, or give --insecure-http (FLEET_INSECURE_HTTP=1, "insecure_http": true) to accept the risk.',
  };
}

export class BrokerEndpoint {
  readonly base: URL;
  readonly ca?: Buffer;

  constructor(brokerUrl: string, caFile?: string) {
    this.base = new URL(brokerUrl);
    if (caFile) this.ca = fs.readFileSync(caFile);
  }

  get secure(): boolean {
    return this.base.protocol === 'https:';
  }

  /** A broker path under the base URL (which may carry a prefix, behind a reverse proxy). */
  private url(pathname: string, protocol: string): URL {
    const url = new URL(this.base.toString());
    url.protocol = protocol;
    url.pathname = `${this.base.pathname.replace(/\/+$/, '')}${pathname}`;
    url.search = '';
    url.hash = '';
    return url;
  }

  get enrolUrl(): URL {
    return this.url(AGENT_ENROL_PATH, this.base.protocol);
  }

  get wsUrl(): URL {
    return this.url(AGENT_WS_PATH, this.secure ? 'wss:' : 'ws:');
  }

  /** TLS options for https and wss: verification on, and the pinned CA when given. */
  get tls(): { ca?: Buffer; rejectUnauthorized: true } {
    return { ...(this.ca ? { ca: this.ca } : {}), rejectUnauthorized: true };
  }

  /** POSTs the enrolment; resolves with the broker's answer or throws EnrolError. */
  enrol(body: EnrolRequest, userAgent: string, signal?: AbortSignal): Promise<EnrolAnswer> {
    const payload = Buffer.from(JSON.stringify(body));
    const url = this.enrolUrl;
    const request = this.secure ? https.request : http.request;
    return new Promise((resolve, reject) => {
      const req = request(
        url,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': payload.length, 'user-agent': userAgent, accept: 'application/json' },
          timeout: ENROL_TIMEOUT_MS,
          ...(signal ? { signal } : {}),
          ...(this.secure ? this.tls : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size <= 64 * 1024) chunks.push(c);
          });
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: Record<string, unknown> = {};
            try {
              parsed = JSON.parse(text) as Record<string, unknown>;
            } catch {
              // not JSON: reported below
            }
            const status = res.statusCode ?? 0;
            if (status === 200 && typeof parsed.device_id === 'string' && (parsed.state === 'pending' || parsed.state === 'approved')) {
              return resolve({
                device_id: parsed.device_id,
                state: parsed.state,
                ...(typeof parsed.broker_key === 'string' ? { broker_key: parsed.broker_key } : {}),
              });
            }
            const { code: _code, error, message, ...details } = parsed;
            reject(
              new EnrolError(
                status || 500,
                typeof error === 'string' ? error : 'bad_answer',
                typeof message === 'string' ? message : `the broker answered ${status} without a usable body`,
                details,
              ),
            );
          });
          res.on('error', (err) => reject(new EnrolError(0, 'network', err.message)));
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${ENROL_TIMEOUT_MS / 1000} s`)));
      req.on('error', (err) => reject(new EnrolError(0, 'network', `cannot reach ${url.origin}: ${err.message}`)));
      req.end(payload);
    });
  }
}
