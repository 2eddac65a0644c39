import type { Request, Response } from 'express';
import type { z, ZodType } from 'zod';
import type { Access } from './access.js';
import type { Principal } from '../access/principal.js';
import type { HeaderCredential } from '../auth/credentials.js';

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

export { accessLabel, type Access } from './access.js';

export interface UploadedFile {
  /** temporary file on disk, removed after the handler returns */
  path: string;
  originalName: string;
  size: number;
  mimeType: string;
}

/**
 * What a handler is given. `deps` are its domain's dependencies, as the domain's routes module
 * declares them (a named interface or a Pick of the services) and broker/routes.ts draws them from
 * the services: a handler reaches nothing else.
 */
export interface HandlerContext<D, P, Q, B> {
  params: P;
  query: Q;
  body: B;
  /** Present on every route but `public` ones. */
  principal: Principal;
  deps: D;
  ip: string;
  userAgent: string;
  /** The Host header as sent ('' without one); only for what names this broker back to its caller. */
  host: string;
  /** The bearer token as sent, if any (public routes may use it, e.g. token renewal). */
  bearer?: string;
  /** The token the caller was authenticated with (a redeemed ticket's, for `bearer-or-ticket`): to re-check them later. */
  token?: string;
  file?: UploadedFile;
  /** Response headers to add (e.g. Refreshed-Token). */
  setHeader(name: string, value: string): void;
  setCookie(name: string, value: string, options: { maxAgeSeconds: number; path: string; httpOnly?: boolean }): void;
  cookie(name: string): string | undefined;
}

/** A handler's answer that is not plain JSON with the route's status. */
export class Reply {
  constructor(
    readonly status: number,
    readonly body?: unknown,
    readonly send?: (res: Response) => void | Promise<void>,
  ) {}
  static json(status: number, body: unknown) {
    return new Reply(status, body);
  }
  static raw(send: (res: Response) => void | Promise<void>) {
    return new Reply(200, undefined, send);
  }
}

/**
 * One call of the API. `D` is what its handler, `targets` and `subject` may use. A table of routes
 * of different domains is `RouteSpec[]` (D = never): it can be listed, documented and tested, but
 * its handlers run only through a MountedRoute, which pairs each with the deps it was declared for.
 */
export interface RouteSpec<D = never, P extends ZodType = ZodType, Q extends ZodType = ZodType, B extends ZodType = ZodType> {
  method: Method;
  /** OpenAPI style, relative to /api/v2: `/deviceattribute/{device_id}` */
  path: string;
  /** Mount outside /api/v2 (e.g. `/challenge-verify`). */
  absolute?: boolean;
  summary: string;
  description?: string;
  tag: string;
  access: Access;
  /** How the caller proves who it is (broker/auth/credentials.ts); `bearer` unless said. */
  credential?: Extract<HeaderCredential, 'bearer' | 'bearer-or-ticket'>;
  /** A long-lived answer (server-sent events): it does not end while the client listens. */
  stream?: boolean;
  /** The device this call concerns, for permissions that accept resources. */
  device?: (input: { params: z.infer<P>; query: z.infer<Q>; body: z.infer<B> }) => string | undefined;
  /**
   * For calls that concern a set of devices named by resource strings (`*`, `tag:`, `node:`) in the
   * body or in a stored record (a port preset): each must be covered by the caller's grant of the
   * permission (AccessService.requireTarget), or the call is refused with 403 before the handler.
   */
  targets?: (input: { params: z.infer<P>; query: z.infer<Q>; body: z.infer<B> }, deps: D) => Promise<string[]>;
  params?: P;
  query?: Q;
  body?: B;
  /** multipart/form-data with one file part of this name; `body` then validates the other fields. */
  upload?: { field: string };
  /** Also accept the body as a form (multipart/form-data without files, or urlencoded), besides JSON; fields arrive as strings. */
  form?: boolean;
  response?: ZodType;
  /** Status of a successful JSON answer (default 200). */
  status?: number;
  /** Event code written to the audit trail for a change; `false` for none. Defaults for non-GET routes. */
  audit?: string | false;
  /**
   * The record a change concerns, loaded before and after the handler inside its transaction: the
   * audit entry says which fields changed, before and after, secrets redacted. `result` (after only)
   * is the handler's answer, for a record the call creates. Without it the entry records the
   * redacted params and query.
   */
  subject?: (
    input: { params: z.infer<P>; query: z.infer<Q>; body: z.infer<B>; principal?: Principal },
    deps: D,
    result?: unknown,
  ) => Promise<object | undefined>;
  /**
   * `false`: the handler talks to agents or streams files, which must not hold a database transaction
   * (SQLite has one connection); its entry is written after it succeeds.
   */
  transaction?: false;
  /** The body as a refused call's audit entry may show it, before the generic redaction (credential fields the route knows of masked). */
  auditBody?: (body: unknown) => unknown;
  /** A remote-access call: a refusal by the permission check is audited as a denied attempt too. */
  auditDenied?: { event: string; action: string };
  /** Listed in the specification but not built yet: answers 501. */
  notImplemented?: boolean;
  handler: (ctx: HandlerContext<D, z.infer<P>, z.infer<Q>, z.infer<B>>) => Promise<unknown>;
}

/**
 * Keeps the types of a route's schemas flowing into its handler. `D` comes from where the route is
 * put: in a domain's `RouteSpec<XRouteDeps>[]` its handler sees `deps: XRouteDeps`; with nothing
 * to say it, `deps` is `unknown` and offers nothing.
 */
export function defineRoute<D, P extends ZodType, Q extends ZodType, B extends ZodType>(spec: RouteSpec<D, P, Q, B>): RouteSpec<D> {
  return spec as unknown as RouteSpec<D>;
}

/** A route with the dependencies it was declared for: what the pipeline mounts (broker/routes.ts makes them). */
export interface MountedRoute {
  route: RouteSpec;
  deps: unknown;
}

/** The one way to pair a route with its deps: their types must agree. */
export function mountRoute<D>(route: RouteSpec<D>, deps: D): MountedRoute {
  return { route, deps };
}

export type RawRequest = Request;
