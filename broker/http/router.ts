import fs from 'node:fs';
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import multer from 'multer';
import { z, ZodError, type ZodType } from 'zod';
import { acceptsResources, type Permission } from '../../shared/permissions.js';
import type { Logger } from 'pino';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AuditService } from '../audit/service.js';
import type { ChangeEpoch } from '../cache.js';
import type { Store } from '../db/database.js';
import type { Config } from '../environment.js';
import { uploadTmpDir } from '../data-dir.js';
import { changeSet } from '../audit/subjects.js';
import { bearerToken, type Authenticator } from '../auth/credentials.js';
import type { DomainError } from '../errors.js';
import { ApiError, answerOf, apiErrorOf, badRequest, forbidden, notImplemented, tooLarge } from './errors.js';
import { API_PREFIX, expressPath } from './api-paths.js';
import { Reply, type HandlerContext, type MountedRoute, type RouteSpec, type UploadedFile } from './route.js';
import { checkResponse, checkResponsesFromEnv } from './response-check.js';

/**
 * What the pipeline itself uses, whatever the route: the credential check, the access check, the
 * audit trail, the transaction a change runs in, the epoch a change bumps, the log, and where an
 * upload goes and how large it may be. A handler gets its own domain's deps (MountedRoute), never these.
 */
export interface PipelineDeps {
  authenticator: Pick<Authenticator, 'authenticate'>;
  access: Pick<AccessService, 'require' | 'requireTarget'>;
  audit: Pick<AuditService, 'recordChange' | 'recordRemoteStart'>;
  store: Pick<Store, 'transaction'>;
  epoch: Pick<ChangeEpoch, 'bump'>;
  logger: Pick<Logger, 'error'>;
  config: Pick<Config, 'dataDir' | 'fileMaxBytes'>;
}

/** Zod issues → a 400 that names the field. */
function validationError(where: string, err: ZodError): DomainError {
  const issues = err.issues.map((i) => ({ field: [where, ...i.path.map(String)].join('.'), message: i.message }));
  const first = issues[0];
  return badRequest(`${first.field}: ${first.message}`, { field: first.field.split('.').slice(1).join('.') || where, issues });
}

function parse<T>(schema: ZodType | undefined, value: unknown, where: string): T {
  if (!schema) return (where === 'body' ? undefined : {}) as T;
  const result = schema.safeParse(value);
  if (!result.success) throw validationError(where, result.error);
  return result.data as T;
}

/** Unknown fields in a body are refused: objects are made strict unless a route says otherwise. */
function strictBody(schema: ZodType | undefined): ZodType | undefined {
  if (schema instanceof z.ZodObject && schema.def.catchall === undefined) return schema.strict();
  return schema;
}

export function clientIp(req: Request): string {
  return (req.ip ?? req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
}

export function readCookie(req: Request, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return decodeURIComponent(part.slice(eq + 1).trim());
  }
  return undefined;
}

const SECRET_KEYS = /pass|secret|code|token|ticket|challenge|key/i;

/** A copy of a request body fit for the audit trail: secrets replaced, long values cut. */
export function redact(value: unknown, depth = 0): unknown {
  if (depth > 4) return '…';
  if (typeof value === 'string') return value.length > 200 ? `${value.slice(0, 200)}…` : value;
  if (Array.isArray(value)) return value.slice(0, 50).map((v) => redact(v, depth + 1));
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .slice(0, 50)
        .map(([k, v]) => [k.slice(0, 100), SECRET_KEYS.test(k) ? '[redacted]' : redact(v, depth + 1)]),
    );
  }
  return value;
}

/** Runs multer for one file part into the broker's temporary folder. */
function receiveUpload(config: PipelineDeps['config'], field: string, req: Request, res: Response): Promise<UploadedFile | undefined> {
  const tmp = uploadTmpDir(config.dataDir);
  fs.mkdirSync(tmp, { recursive: true, mode: 0o700 });
  const upload = multer({
    dest: tmp,
    limits: { fileSize: config.fileMaxBytes, files: 1, fields: 20, fieldSize: 64 * 1024 },
    // Clients send file names as raw UTF-8 (browsers, Go, curl); multer's default reads them as Latin-1.
    defParamCharset: 'utf8',
  }).single(field);
  return new Promise((resolve, reject) => {
    upload(req, res, (err: unknown) => {
      if (err) {
        if (err instanceof multer.MulterError) {
          if (err.code === 'LIMIT_FILE_SIZE') return reject(tooLarge(`The file is larger than ${config.fileMaxBytes} bytes.`));
          return reject(badRequest(`Multipart upload refused: ${err.message}${err.field ? ` (${err.field})` : ''}.`, { field: err.field ?? field }));
        }
        return reject(badRequest(`Multipart body could not be read: ${(err as Error).message}`));
      }
      const f = req.file;
      resolve(f ? { path: f.path, originalName: f.originalname, size: f.size, mimeType: f.mimetype } : undefined);
    });
  });
}

/** Reads a form body (multipart without files, or urlencoded) into req.body. */
function receiveForm(req: Request, res: Response): Promise<void> {
  const parse = req.is('multipart/form-data')
    ? multer({ limits: { files: 0, fields: 20, fieldSize: 64 * 1024 } }).none()
    : express.urlencoded({ extended: false, limit: '64kb', parameterLimit: 20 });
  return new Promise((resolve, reject) => {
    parse(req, res, (err: unknown) => {
      if (err instanceof multer.MulterError)
        return reject(badRequest(`Form refused: ${err.message}${err.field ? ` (${err.field})` : ''}.`, { field: err.field ?? 'body' }));
      if (err) return reject(err);
      resolve();
    });
  });
}

async function authorize(
  access: PipelineDeps['access'],
  { route, deps }: MountedRoute,
  principal: Principal,
  input: { params: unknown; query: unknown; body: unknown },
) {
  if (typeof route.access !== 'string' || route.access === 'public' || route.access === 'authenticated') return;
  const permission = route.access;
  const deviceId = acceptsResources(permission) && route.device ? route.device(input) : undefined;
  await access.require(principal, permission, deviceId);
  if (acceptsResources(permission) && route.targets) {
    for (const target of await route.targets(input, deps as never)) await access.requireTarget(principal, permission, target);
  }
}

function deviceOf(route: RouteSpec, req: Request): string | undefined {
  try {
    const device = route.device?.({ params: req.params, query: req.query, body: req.body });
    return typeof device === 'string' ? device : undefined;
  } catch {
    return undefined;
  }
}

function eventOf(route: RouteSpec): string {
  return typeof route.audit === 'string' ? route.audit : `${route.tag}.${route.method}`;
}

function actionOf(route: RouteSpec): string {
  return `${route.method.toUpperCase()} ${route.absolute ? '' : API_PREFIX}${route.path}`;
}

/** Answers that are a step of a flow, not a refusal: the second-factor challenge of a sign-in. */
const NOT_REFUSALS = new Set(['2fa_required']);

/**
 * Every refused or failed call that could change something is an entry: 401 and 403 as `denied`,
 * anything else as `error`, with the reason and what the request named (redacted, bounded). Its
 * transaction, if any, was rolled back: the entry is written on its own. A remote-access call
 * (`auditDenied`) refused before its handler is a denied attempt of that action; once its handler
 * runs, the remote service audits the outcome itself.
 */
async function auditRefusal(pipeline: PipelineDeps, route: RouteSpec, req: Request, principal: Principal | undefined, handlerStarted: boolean, err: unknown) {
  const apiError = answerOf(err);
  if (apiError && NOT_REFUSALS.has(apiError.error)) return;
  if (route.auditDenied && handlerStarted) return;
  const status = apiError?.status ?? (err as { status?: number }).status ?? 500;
  const reason = apiError ? `${apiError.error}: ${apiError.message}` : status < 500 ? `invalid_request: ${(err as Error).message}` : 'internal_error';
  try {
    if (route.auditDenied) {
      await pipeline.audit.recordRemoteStart({
        event: route.auditDenied.event,
        user: principal?.user,
        deviceId: deviceOf(route, req) ?? '',
        action: route.auditDenied.action,
        options: {},
        allowed: false,
        reason,
        ip: clientIp(req),
        source: 'api',
        sessionId: principal?.sessionId,
      });
      return;
    }
    await pipeline.audit.recordChange({
      event: eventOf(route),
      user: principal?.user,
      action: actionOf(route),
      deviceId: deviceOf(route, req),
      options: { params: redact(req.params), query: redact(req.query), body: redact(route.auditBody ? route.auditBody(req.body) : req.body) },
      ip: clientIp(req),
      result: status === 401 || status === 403 ? 'denied' : 'error',
      reason,
    });
  } catch (auditErr) {
    pipeline.logger.error({ err: auditErr, route: actionOf(route) }, 'refused call not audited');
  }
}

/** One call going through the pipeline: what its steps have learnt so far. */
interface Call {
  route: RouteSpec;
  /** the route's own dependencies, handed to its handler, `targets` and `subject` (MountedRoute) */
  deps: unknown;
  bodySchema: ZodType | undefined;
  pipeline: PipelineDeps;
  req: Request;
  res: Response;
  principal?: Principal;
  /** the token the caller was authenticated with (a ticket's token for `bearer-or-ticket`) */
  token?: string;
  file?: UploadedFile;
  input?: { params: unknown; query: unknown; body: unknown };
  /** once true, a refusal is the handler's own (a remote-access call audits its outcome itself) */
  handlerStarted: boolean;
  /** test-only: 2xx JSON answers are parsed with the route's declared `response` (response-check.ts) */
  checkResponses?: boolean;
}

/** Step 1: the credential the route declares (broker/auth/credentials.ts) → the caller. */
async function authenticate(call: Call): Promise<void> {
  const { route, req, pipeline } = call;
  if (route.access === 'public') return;
  const ticket = typeof req.query.ticket === 'string' ? req.query.ticket : undefined;
  const { principal, token } = await pipeline.authenticator.authenticate(route.credential ?? 'bearer', req.headers, ticket);
  call.principal = principal;
  call.token = token;
}

/** Step 2: without the permission on any device the answer is 403 whatever the input: no validation hints, no upload read. */
async function gate(call: Call): Promise<void> {
  const { route, principal, pipeline } = call;
  if (!principal || route.access === 'authenticated' || route.access === 'public') return;
  if (Array.isArray(route.access)) {
    if (!route.access.some((p) => principal.has(p))) throw forbidden(`Needs ${route.access.join(' or ')}.`);
    return;
  }
  const permission = route.access as Permission;
  if (!principal.has(permission)) await pipeline.access.require(principal, permission);
}

/** Step 3: a multipart file or a form, when the route takes one. */
async function receive(call: Call): Promise<void> {
  const { route, req, res, pipeline } = call;
  if (route.upload) {
    if (!req.is('multipart/form-data')) throw badRequest('Send multipart/form-data for this call.', { field: route.upload.field });
    call.file = await receiveUpload(pipeline.config, route.upload.field, req, res);
  } else if (route.form && req.is(['multipart/form-data', 'application/x-www-form-urlencoded'])) {
    await receiveForm(req, res);
  }
}

/** Step 4: params, query and body against the route's schemas (400 naming the field). */
function validate(call: Call): void {
  const { route, req, bodySchema } = call;
  const params = parse<unknown>(route.params, req.params, 'params');
  const query = parse<unknown>(route.query, req.query, 'query');
  const rawBody = route.upload || (route.form && req.body) ? { ...req.body } : req.body;
  const body = parse<unknown>(bodySchema, route.method === 'get' ? undefined : (rawBody ?? (bodySchema ? {} : undefined)), 'body');
  call.input = { params, query, body };
}

/** Step 5: the permission on the device and the targets the call concerns. */
async function authorizeCall(call: Call): Promise<void> {
  const { route, deps, principal, pipeline, input } = call;
  if (principal && input) await authorize(pipeline.access, { route, deps }, principal, input);
  if (route.notImplemented) throw notImplemented(`${route.method.toUpperCase()} ${API_PREFIX}${route.path}`);
}

function contextOf(call: Call): HandlerContext<never, unknown, unknown, unknown> {
  const { req, res, deps } = call;
  const input = call.input as { params: unknown; query: unknown; body: unknown };
  return {
    ...input,
    principal: call.principal as Principal,
    // The route was mounted with the deps it was declared for (mountRoute), which the table's type no longer says.
    deps: deps as never,
    ip: clientIp(req),
    bearer: bearerToken(req.headers),
    token: call.token,
    userAgent: String(req.headers['user-agent'] ?? ''),
    host: String(req.headers.host ?? ''),
    file: call.file,
    setHeader: (name, value) => res.setHeader(name, value),
    setCookie: (name, value, o) => {
      res.cookie(name, value, { maxAge: o.maxAgeSeconds * 1000, path: o.path, httpOnly: o.httpOnly ?? true, sameSite: 'strict', secure: req.secure });
    },
    cookie: (name) => readCookie(req, name),
  };
}

/** Step 6: the handler, and for a change its audit entry: both commit or fail together. */
async function runHandler(call: Call): Promise<unknown> {
  const { route, deps, pipeline, principal } = call;
  const ctx = contextOf(call);
  call.handlerStarted = true;
  const audited = route.method !== 'get' && route.audit !== false;
  const input = { ...(call.input as { params: unknown; query: unknown; body: unknown }), principal };
  const change = async () => {
    const before = route.subject ? await route.subject(input, deps as never) : undefined;
    const answer = await route.handler(ctx);
    if (!audited) return answer;
    const after = route.subject ? await route.subject(input, deps as never, answer) : undefined;
    await pipeline.audit.recordChange({
      event: eventOf(route),
      user: principal?.user,
      action: actionOf(route),
      deviceId: route.device ? route.device(input) : undefined,
      options: route.subject ? { params: redact(ctx.params), ...changeSet(before, after) } : { params: redact(ctx.params), query: redact(ctx.query) },
      ip: ctx.ip,
    });
    return answer;
  };
  return audited && route.transaction !== false ? await pipeline.store.transaction(change) : await change();
}

/** Step 7: the answer — a Reply, JSON with the route's status, or no content; in tests, JSON checked against the declared schema. */
async function answer(call: Call, result: unknown): Promise<void> {
  const { route, res, pipeline } = call;
  const json = (status: number, body: unknown) => {
    if (call.checkResponses) checkResponse(route, status, body, pipeline.logger);
    res.status(status).json(body);
  };
  if (result instanceof Reply) {
    if (result.send) return await result.send(res);
    if (result.body === undefined) return void res.status(result.status).end();
    return json(result.status, result.body);
  }
  if (result === undefined) return void res.status(route.status ?? 204).end();
  json(route.status ?? 200, result);
}

/** The pipeline of every REST call: the steps above in order; a refusal is audited, the temporary file removed. */
async function handleCall(call: Call): Promise<void> {
  const { route, pipeline, req } = call;
  try {
    await authenticate(call);
    await gate(call);
    await receive(call);
    validate(call);
    await authorizeCall(call);
    await answer(call, await runHandler(call));
  } catch (err) {
    if (route.method !== 'get' || route.auditDenied) await auditRefusal(pipeline, route, req, call.principal, call.handlerStarted, err);
    throw err;
  } finally {
    // Any call that may have changed something empties the hot-path caches (cache.ts).
    if (route.method !== 'get') pipeline.epoch.bump();
    if (call.file) fs.rm(call.file.path, { force: true }, () => {});
  }
}

/**
 * Mounts routes, each with its own deps, on a router: each request goes through handleCall with the
 * pipeline's deps. `checkResponses` is for tests only (response-check.ts); it follows
 * FLEET_CHECK_RESPONSES unless given.
 */
export function mountRoutes(router: Router, routes: MountedRoute[], pipeline: PipelineDeps, options: { checkResponses?: boolean } = {}): void {
  const checkResponses = options.checkResponses ?? checkResponsesFromEnv();
  // One sub-router per first path segment: a request is matched against its few siblings rather than
  // walking the whole table (express tries routes one by one).
  const groups = new Map<string, Router>();
  const routerFor = (path: string): { target: Router; rest: string } => {
    const m = /^\/([^/{}]+)(\/.*)?$/.exec(path);
    if (!m) return { target: router, rest: path };
    let group = groups.get(m[1]);
    if (!group) {
      group = express.Router({ mergeParams: true });
      groups.set(m[1], group);
      router.use(`/${m[1]}`, group);
    }
    return { target: group, rest: m[2] ?? '/' };
  };
  const methodsByTarget = new Map<Router, { pattern: RegExp; method: string }[]>();
  for (const { route, deps } of routes) {
    const bodySchema = strictBody(route.body);
    const handler = (req: Request, res: Response) => handleCall({ route, deps, bodySchema, pipeline, req, res, handlerStarted: false, checkResponses });
    const { target, rest } = routerFor(route.path);
    target[route.method](expressPath(rest), handler);
    const known = methodsByTarget.get(target) ?? [];
    known.push({ pattern: pathPattern(rest), method: route.method.toUpperCase() });
    methodsByTarget.set(target, known);
  }
  // A known path asked with another method: 405 with the methods it has (after every route, so a
  // sibling pattern with that method still answers first). OPTIONS is left to express.
  for (const [target, known] of methodsByTarget) {
    target.use((req: Request, _res: Response, next: NextFunction) => {
      if (req.method === 'OPTIONS') return next();
      const allowed = new Set(known.filter((k) => k.pattern.test(req.path)).map((k) => k.method));
      if (allowed.size === 0 || allowed.has(req.method)) return next();
      if (allowed.has('GET')) allowed.add('HEAD');
      const allow = [...allowed].sort().join(', ');
      next(
        new ApiError(
          405,
          'method_not_allowed',
          `${req.method} is not a method of ${req.baseUrl}${req.path}: use ${allow}.`,
          { allow: [...allowed].sort() },
          { Allow: allow },
        ),
      );
    });
  }
}

/** An OpenAPI path as a regular expression over the request path (a parameter is one segment). */
function pathPattern(openapiPath: string): RegExp {
  const source = openapiPath
    .split(/(\{[^}]+\})/)
    .map((part) => (part.startsWith('{') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(`^${source}/?$`);
}

/** An error a library threw (zod, express's body parsers, http-errors) as the API answers it; undefined for a failure. */
function libraryAnswer(err: unknown): ApiError | undefined {
  if (err instanceof ZodError) return apiErrorOf(validationError('body', err));
  const e = err as { type?: string; status?: number; message: string };
  if (e.type === 'entity.parse.failed') return apiErrorOf(badRequest('The body is not valid JSON.', {}, 'invalid_json'));
  if (e.type === 'entity.too.large') return apiErrorOf(tooLarge('The request body is too large.'));
  if (e.status && e.status < 500) return new ApiError(e.status, 'invalid_request', e.message);
  return undefined;
}

/** The error handler of the whole app: every failure answers the CONTRACT.md shape. */
export function errorHandler(deps: Pick<PipelineDeps, 'logger'>) {
  return (err: unknown, req: Request, res: Response, _next: NextFunction) => {
    let apiError = answerOf(err) ?? libraryAnswer(err);
    if (!apiError) {
      deps.logger.error({ err, method: req.method, url: req.originalUrl }, 'request failed');
      apiError = new ApiError(500, 'internal_error', 'The broker failed to answer this request; the error is logged.');
    }
    if (res.headersSent) return void res.end();
    for (const [k, v] of Object.entries(apiError.headers)) res.setHeader(k, v);
    res.status(apiError.status).json(apiError.toJSON());
  };
}

export { express };
