/**
 * One remote-access attempt, from its query to an open channel: parsed, decided by the access
 * service against the caller's roles at that moment, audited (allowed or denied) before anything
 * starts, its recording started, and only then its channel opened on the device's agent (reached
 * through the AgentLocator). Refusals are audited too, and answered as error frames.
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { ZodType } from 'zod';
import { BoundedMap } from '../../shared/bounded-map.js';
import type { Channel } from '../../shared/mux.js';
import type { ChannelParams, RemoteKind } from '../../shared/protocol.js';
import { isAccessRefusal, refusalCodeOf } from '../../shared/codes.js';
import { normalizeDevicePath, type RemoteRequest } from '../../shared/resources.js';
import type { AccessDecision, AccessService } from '../access/access.js';
import type { AgentLocator } from '../agents/locator.js';
import type { AuditService, RemoteAuditEnd } from '../audit/service.js';
import { bounded } from '../audit/service.js';
import type { Config } from '../environment.js';
import type { DomainError } from '../errors.js';
import { errorAnswer } from '../http/statuses.js';
import { errorFrame, type ErrorFrame, type RelayOptions } from './relay.js';
import { ConsoleRecorder } from './recordings.js';
import { consoleQuery, copyQuery, tunnelQuery, type ConsoleQuery, type CopyQuery, type TunnelQuery } from './schemas.js';
import type { Caller } from './live-sessions.js';

/** Query parameters that carry credentials: never written to the audit trail. */
const CREDENTIAL_PARAMS = new Set(['ticket', 'token', 'access_token', 'authorization']);

export type Refusal = { ok: false; frame: ErrorFrame; code: number };
export type Prepared =
  | Refusal
  | {
      ok: true;
      caller: Caller;
      deviceId: string;
      request: RemoteRequest;
      channel: Channel;
      relayOptions: RelayOptions;
      auditId: number;
      startedAt: number;
      /** The live session's id (and its recording's name). */
      sessionId: string;
      /** console: where it is recorded, unless its roles turn recording off */
      recorder?: ConsoleRecorder;
    };

/** How a session ended, for the end entry of its audit trail. */
export type SessionOutcome = { bytesIn: number; bytesOut: number; reason: string; result?: RemoteAuditEnd['result'] };

/** What an attempt uses. */
export interface AttemptDeps {
  config: Pick<Config, 'dataDir'>;
  access: Pick<AccessService, 'decide' | 'copyRoots' | 'consoleRecording'>;
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd' | 'recordRefusedAttempt'>;
  locator: AgentLocator;
}

/** An attempt decided and audited as started, its channel still to open. */
interface Attempt {
  caller: Caller;
  kind: RemoteKind;
  deviceId: string;
  request: RemoteRequest;
  params: ChannelParams;
  decision: AccessDecision;
  /** its start entry in the audit trail */
  auditId: number;
  startedAt: number;
  /** the live session's id (and its recording's name) */
  sessionId: string;
  recorder?: ConsoleRecorder;
}

export function refusal(status: number, error: string, message: string, details: Record<string, unknown> = {}): Refusal {
  return { ok: false, frame: errorFrame(status, error, message, details), code: 4000 + status };
}

/** A domain error as a session's refusal: the status of its kind in the frame, and 4000 + it as the close code. */
export function fromDomainError(err: DomainError): Refusal {
  const { status, body } = errorAnswer(err);
  const { code: _c, error, message, ...details } = body as { code: number; error: string; message: string };
  return refusal(status, error, message, details);
}

/** The 400 of a query that does not parse, naming its first wrong field. */
export function invalidQuery(issues: readonly { path: readonly PropertyKey[]; message: string }[]): Refusal {
  const issue = issues[0];
  const field = issue.path.map(String).join('.') || 'query';
  return refusal(400, 'invalid_request', `query.${field}: ${issue.message}`, { field });
}

/** What the audit entry records of a request. */
function auditOptions(request: RemoteRequest, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { action: _a, ...options } = request as RemoteRequest & Record<string, unknown>;
  return { ...options, ...extra };
}

/** A parsed query as the request decided, the channel's parameters, and what the audit entry records. */
function describe(kind: RemoteKind, query: unknown): { request: RemoteRequest; params: ChannelParams; options: Record<string, unknown> } {
  if (kind === 'console') {
    const q = query as ConsoleQuery;
    const user = q.user === undefined ? {} : { user: q.user };
    const command = q.command === undefined ? {} : { command: q.command };
    return {
      request: { action: 'console', ...user },
      params: { cols: q.cols, rows: q.rows, ...user, ...command },
      options: { cols: q.cols, rows: q.rows, ...user, ...command },
    };
  }
  if (kind === 'tunnel') {
    const q = query as TunnelQuery;
    const request: RemoteRequest = { action: 'tunnel', proto: q.proto, port: q.port, dst: q.dst };
    return { request, params: { proto: q.proto, port: q.port, dst: q.dst }, options: auditOptions(request) };
  }
  const q = query as CopyQuery;
  const path = normalizeDevicePath(q.path) ?? q.path;
  const request: RemoteRequest = { action: 'copy', direction: q.direction, path: q.path };
  const archive = q.format === 'tar.gz';
  const mode = q.mode !== undefined && !archive && q.direction === 'upload' ? { mode: q.mode } : {};
  return {
    request,
    params: {
      direction: q.direction,
      path,
      ...(!archive && q.size !== undefined ? { size: q.size } : {}),
      ...(!archive && q.sha256 ? { sha256: q.sha256 } : {}),
      ...(archive ? { format: 'tar.gz' as const } : {}),
      ...mode,
    },
    options: auditOptions(request, {
      ...(path !== q.path ? { normalized_path: path } : {}),
      ...(!archive && q.size !== undefined ? { size: q.size } : {}),
      ...(!archive && q.sha256 ? { sha256: q.sha256 } : {}),
      ...(archive ? { format: 'tar.gz' } : {}),
      ...(mode.mode !== undefined ? { mode: `0${mode.mode.toString(8).padStart(3, '0')}` } : {}),
    }),
  };
}

/** A query's parse: its data (frozen when kept), or what is wrong with it. */
type ParsedQuery = { success: true; data: unknown } | { success: false; error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] } };

/** How many parsed queries are kept, and the longest query kept. */
export const PARSED_QUERIES_KEPT = 256;
export const PARSED_QUERY_MAX_LENGTH = 512;

/**
 * The queries of recent attempts, parsed once: a client opening sessions one after another sends the
 * same query each time (a tunnel's device, port and destination), and zod's parse of it was 3-4 % of
 * the broker's work per session. A parse depends on the query's text alone, so a query seen again is
 * answered with the data parsed the first time (frozen, so that no attempt can change another's).
 * Only queries that parse are kept, none carrying a ticket (each is used once) and none longer than
 * PARSED_QUERY_MAX_LENGTH; at most PARSED_QUERIES_KEPT, the oldest dropped first.
 */
export class ParsedQueries {
  private readonly kept = new BoundedMap<string, unknown>(PARSED_QUERIES_KEPT);
  /** Parses run (for tests: a query seen again is not parsed again). */
  parses = 0;

  /** Queries kept. */
  get size(): number {
    return this.kept.size;
  }

  parse(kind: RemoteKind, url: URL): ParsedQuery {
    const key = url.search.length <= PARSED_QUERY_MAX_LENGTH && !url.searchParams.has('ticket') ? `${kind}${url.search}` : undefined;
    if (key !== undefined) {
      const data = this.kept.get(key);
      if (data !== undefined) return { success: true, data };
    }
    const schema: ZodType = kind === 'console' ? consoleQuery : kind === 'tunnel' ? tunnelQuery : copyQuery;
    this.parses += 1;
    const parsed = schema.safeParse(Object.fromEntries(url.searchParams));
    if (!parsed.success || key === undefined) return parsed;
    const data = deepFreeze(parsed.data);
    this.kept.set(key, data);
    return { success: true, data };
  }
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/** Remote-access attempts: each one decided, audited, then opened (see the file's header). */
export class Attempts {
  /** The queries parsed lately (see ParsedQueries). */
  private readonly queries = new ParsedQueries();

  constructor(
    private readonly deps: AttemptDeps,
    private readonly log: Logger,
  ) {}

  /** An attempt over WebSocket, from its query: a query that does not parse is refused (and audited) before anything is decided. */
  async prepare(kind: RemoteKind, caller: Caller, url: URL): Promise<Prepared> {
    const parsed = this.queries.parse(kind, url);
    if (!parsed.success) return this.refuseEarly(kind, url, caller.ip, caller, invalidQuery(parsed.error.issues));
    const { request, params, options } = describe(kind, parsed.data);
    const deviceId = (parsed.data as { device_id: string }).device_id;
    return this.authorizeAndOpen(caller, kind, deviceId, request, params, options);
  }

  /**
   * The heart of every attempt: decide, audit (allowed or denied) before anything starts, then
   * open the channel. A failed audit write refuses the session.
   */
  async authorizeAndOpen(
    caller: Caller,
    kind: RemoteKind,
    deviceId: string,
    request: RemoteRequest,
    params: ChannelParams,
    options: Record<string, unknown>,
  ): Promise<Prepared> {
    const { principal } = caller;
    const decision = await this.deps.access.decide(principal, 'remote-access:connect', deviceId, request);
    const sessionId = crypto.randomUUID();
    let recorder: ConsoleRecorder | undefined;
    let recordingFailure: string | undefined;
    if (kind === 'console' && request.action === 'console' && decision.allowed && decision.device) {
      const mode = this.deps.access.consoleRecording(principal, decision.device, request);
      if (mode !== 'off') {
        const size = params as { cols: number; rows: number };
        try {
          recorder = ConsoleRecorder.open(this.deps.config.dataDir, sessionId, size, { title: `console on ${deviceId}` }, this.log, mode === 'required');
          options = { ...options, recording: sessionId };
        } catch (err) {
          this.log.error({ err, deviceId }, 'console recording could not be started');
          // Fail closed: a console whose recording is required does not run unrecorded.
          if (mode === 'required') recordingFailure = `its recording is required and could not be written (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
        }
      }
    }
    let auditId: number;
    try {
      auditId = await this.deps.audit.recordRemoteStart({
        event: `remote.${request.action}`,
        user: principal.user,
        deviceId,
        action: request.action,
        options,
        allowed: decision.allowed && !recordingFailure,
        reason: recordingFailure ?? decision.reason,
        ip: caller.ip,
        source: caller.source,
        sessionId: principal.sessionId,
      });
    } catch (err) {
      void recorder?.close();
      this.log.error({ err, deviceId }, 'remote-access attempt not audited: refused');
      return refusal(500, 'audit_failed', 'The attempt could not be written to the audit log, so the session was refused. Try again shortly.');
    }
    const startedAt = Date.now();
    if (recordingFailure) {
      return refusal(503, 'recording_unavailable', `The console was refused: ${recordingFailure}. Ask an administrator to check the broker's disk.`, {
        device_id: deviceId,
      });
    }
    // From here every refusal ends the recording that was started.
    const result = await this.open({ caller, kind, deviceId, request, params, decision, auditId, startedAt, sessionId, recorder });
    if (!result.ok) void recorder?.close();
    return result;
  }

  /** Opens the channel of an attempt audited as started; a refusal from here on writes its end too. */
  private async open(attempt: Attempt): Promise<Prepared> {
    const { caller, kind, deviceId, request, params, decision, auditId, startedAt, sessionId, recorder } = attempt;
    if (!decision.allowed) {
      if (decision.code === 'no_such_device') return refusal(404, 'not_found', `Device ${deviceId} was not found.`);
      return refusal(403, 'forbidden', `Not allowed: ${decision.reason}.`, { permission: 'remote-access:connect', device_id: deviceId });
    }
    if (!this.deps.locator.isConnected(deviceId)) {
      await this.finish(auditId, startedAt, { bytesIn: 0, bytesOut: 0, reason: 'device not connected', result: 'error' });
      return refusal(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, { device_id: deviceId });
    }
    if (kind === 'copy' && decision.device) {
      const allowed = this.deps.access.copyRoots(caller.principal, decision.device, request);
      if (allowed) (params as { allowed?: string[] }).allowed = allowed;
    }
    let opened: { channel: Channel; info: Record<string, unknown> };
    try {
      opened = await this.deps.locator.open(deviceId, kind, params);
    } catch (err) {
      const message = (err as Error).message;
      // The agent's refusal code (shared/codes.ts) says what happened; its sentence goes to the user.
      // A device's own access refusal (a copy path escaping its roots through a symlink) is a denial.
      const code = refusalCodeOf(err);
      const denied = isAccessRefusal(code);
      await this.finish(auditId, startedAt, { bytesIn: 0, bytesOut: 0, reason: `refused by the device: ${message}`, result: denied ? 'denied' : 'error' });
      if (denied) return refusal(403, 'forbidden', message, { device_id: deviceId, refusal: code });
      if ((err as { code?: string }).code === 'agent_not_connected') {
        return refusal(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, { device_id: deviceId });
      }
      return refusal(502, 'device_refused', message, { device_id: deviceId, ...(code ? { refusal: code } : {}) });
    }
    if (kind === 'console' && (params as { command?: string[] }).command && opened.info.command !== true) {
      // An older agent would open a shell in place of the command: never that.
      opened.channel.destroy();
      const message = 'The agent on this device cannot run a command in a console; update it, or open a console without a command.';
      await this.finish(auditId, startedAt, { bytesIn: 0, bytesOut: 0, reason: `refused by the device: ${message}`, result: 'error' });
      return refusal(502, 'device_refused', message, { device_id: deviceId });
    }
    const relayOptions: RelayOptions = {
      kind,
      info: opened.info,
      ...(kind === 'console' ? { size: params as { cols: number; rows: number } } : {}),
      ...(kind === 'copy' ? { direction: (params as { direction: 'upload' | 'download' }).direction } : {}),
      ...(recorder ? { recorder } : {}),
    };
    return { ok: true, caller, deviceId, request, channel: opened.channel, relayOptions, auditId, startedAt, sessionId, recorder };
  }

  /**
   * An attempt refused before it could be decided (no or bad token, spent ticket, bad query) is an
   * attempt too: audited as denied with what can be told of it, bounded, and never the credentials.
   */
  async refuseEarly(kind: RemoteKind, url: URL, ip: string, caller: Caller | undefined, answer: Refusal): Promise<Refusal> {
    const options: Record<string, string> = {};
    for (const [name, value] of [...url.searchParams].slice(0, 10)) {
      if (!CREDENTIAL_PARAMS.has(name.toLowerCase())) options[bounded(name, 40)] = bounded(value, 200);
    }
    await this.deps.audit.recordRefusedAttempt({
      principal: caller?.principal,
      deviceId: url.searchParams.get('device_id') ?? '',
      action: kind,
      options,
      reason: `${answer.frame.error}: ${answer.frame.message}`,
      ip,
      source: caller?.source ?? (url.searchParams.has('ticket') ? 'web' : 'api'),
    });
    return answer;
  }

  /** Audits the end of a session that was audited as started. */
  async finish(auditId: number, startedAt: number, end: SessionOutcome): Promise<void> {
    try {
      await this.deps.audit.recordRemoteEnd(auditId, {
        durationMs: Date.now() - startedAt,
        bytesIn: end.bytesIn,
        bytesOut: end.bytesOut,
        reason: end.reason,
        result: end.result,
      });
    } catch (err) {
      this.log.error({ err, auditId }, 'end of remote session not audited');
    }
  }
}
