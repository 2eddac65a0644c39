import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { isHeaderCredential, type Authenticated, type Authenticator, type Credential } from '../auth/credentials.js';
import type { Access } from './access.js';

/** One WebSocket upgrade request, as each step of the pipeline sees it. */
export interface UpgradeAttempt {
  req: IncomingMessage;
  socket: Duplex;
  head: Buffer;
  url: URL;
}

/**
 * A WebSocket entry point of the broker, declared in the entry-point table (broker/upgrades.ts)
 * beside the REST routes. Its pipeline (UpgradeRouter.handle): `admit` (what is no handshake for
 * this endpoint, a closing service, a full handshake budget — answered before any credential is
 * read), the credential (broker/auth/credentials.ts: header credentials here, `agent-key` and
 * `peer-hmac` in band after the handshake by the handler), `refused` (an attempt whose credential
 * is missing or bad: audited as the `audit` event and answered as the endpoint answers), then
 * `open` with the caller — whose access check (broker/access/) needs the request it parses.
 */
export interface UpgradeSpec<D = unknown> {
  /** An exact path, or with `prefix` every path under it (qbee's `/device/<id>`). */
  path: string;
  prefix?: boolean;
  summary: string;
  credential: Credential;
  /**
   * Who may open it: a permission (decided by the handler's domain against the device and the
   * request, e.g. broker/access/remote.ts), `enrolled-device` (an approved device's key) or
   * `cluster-peer` (a holder of CLUSTER_SECRET).
   */
  access: Access | 'enrolled-device' | 'cluster-peer';
  /** The audit event of its attempts, refused ones included; false: not audited (agents and peers are logged). */
  audit: string | false;
  /** Only mounted when this holds (the peer endpoint exists only with CLUSTER_SECRET). */
  enabled?: (deps: D) => boolean;
  /** First step: false when the handler already answered the socket. */
  admit?: (deps: D, attempt: UpgradeAttempt) => boolean;
  /** A header credential that was missing or bad (a DomainError of kind unauthenticated), or a failure while checking it. */
  refused?: (deps: D, attempt: UpgradeAttempt, err: unknown) => void | Promise<void>;
  open: (deps: D, attempt: UpgradeAttempt, caller: Authenticated | undefined) => void | Promise<void>;
}

/** Keeps a spec's dependency type flowing into its steps. */
export function defineUpgrade<D>(spec: UpgradeSpec<D>): UpgradeSpec<D> {
  return spec;
}

const NOT_FOUND =
  'HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{"code":404,"error":"not_found","message":"No WebSocket endpoint at this path."}';

/** WebSocket upgrades by path, from the entry-point table: one pipeline for every endpoint. */
export class UpgradeRouter<D> {
  private readonly exact = new Map<string, UpgradeSpec<D>>();
  private readonly prefixes: UpgradeSpec<D>[] = [];

  constructor(
    specs: UpgradeSpec<D>[],
    private readonly deps: D,
    private readonly authenticator: Pick<Authenticator, 'authenticate'>,
    private readonly logger: Logger,
  ) {
    for (const spec of specs) {
      if (spec.enabled && !spec.enabled(deps)) continue;
      if (spec.prefix) this.prefixes.push(spec);
      else this.exact.set(spec.path, spec);
    }
  }

  handle(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://broker.invalid');
    const spec = this.exact.get(url.pathname) ?? this.prefixes.find((p) => url.pathname.startsWith(p.path));
    if (!spec) return void socket.end(NOT_FOUND);
    const attempt: UpgradeAttempt = { req, socket, head, url };
    try {
      if (spec.admit && !spec.admit(this.deps, attempt)) return;
      if (!isHeaderCredential(spec.credential)) return void this.run(spec, attempt, spec.open(this.deps, attempt, undefined));
      void this.authenticateAndOpen(spec, attempt);
    } catch (err) {
      this.failed(spec, attempt, err);
    }
  }

  private async authenticateAndOpen(spec: UpgradeSpec<D>, attempt: UpgradeAttempt): Promise<void> {
    let caller: Authenticated;
    try {
      caller = await this.authenticator.authenticate(spec.credential as never, attempt.req.headers, attempt.url.searchParams.get('ticket') ?? undefined);
    } catch (err) {
      if (!spec.refused) return this.failed(spec, attempt, err);
      return this.run(spec, attempt, spec.refused(this.deps, attempt, err));
    }
    this.run(spec, attempt, spec.open(this.deps, attempt, caller));
  }

  private run(spec: UpgradeSpec<D>, attempt: UpgradeAttempt, step: void | Promise<void>): void {
    if (step instanceof Promise) step.catch((err: unknown) => this.failed(spec, attempt, err));
  }

  private failed(spec: UpgradeSpec<D>, attempt: UpgradeAttempt, err: unknown): void {
    this.logger.error({ err, path: spec.path }, 'upgrade failed');
    attempt.socket.destroy();
  }
}
