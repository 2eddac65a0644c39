/**
 * The resource-string grammar and its evaluator: who may do what on which device.
 *
 *   resource := entity [ "/" action ]
 *   entity   := "*" | "tag:" TAG | "node:" NODE_ID
 *   action   := "reload" | ( "console" | "tunnel" | "copy" ) [ "(" options ")" ]
 *   options  := option *( ";" option )      option := key "=" value *( "," value )
 *
 * One parser and one evaluator serve the broker (role validation, every authorization), the agent
 * (re-checking copy paths) and the web console (live validation in the policy editor).
 */
import type { DecisionCode, PolicyProblemCode } from './codes.js';
import { acceptsResources, isPermission } from './permissions.js';

export const MAX_RESOURCE_LENGTH = 1024;
export const MAX_RESOURCES_PER_POLICY = 100;
/** A local login user a console may run as: a portable POSIX user name (lower case, at most 32). */
export const LOGIN_USER_PATTERN = /^[a-z_][a-z0-9_-]{0,31}$/;
/**
 * A tag: letters, digits, "_", ".", "-" and ":" starting with a letter or digit, or any tag qbee
 * writes (`^[a-z0-9:-]{3,64}$`, e.g. `terraform:acctest:a1`). A resource `tag:a:b` names the tag
 * `a:b`: the entity's kind ends at the first colon.
 */
export const TAG_PATTERN = /^(?:[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}|[a-z0-9:-]{3,64})$/;
/** How TAG_PATTERN reads in messages. */
export const TAG_RULE = 'letters, digits, "_", ".", "-" and ":", at most 64, starting with a letter or digit (or qbee\'s: a-z, 0-9, ":" and "-", 3 to 64)';
export const NODE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$/;
const HOST_PATTERN = /^(\*|[A-Za-z0-9](?:[A-Za-z0-9\-_.]{0,251}[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]{2,45}\]?)$/;

export type Entity = { kind: 'all' } | { kind: 'tag'; tag: string } | { kind: 'node'; nodeId: string };
export type RemoteActionName = 'console' | 'tunnel' | 'copy' | 'reload';
export const REMOTE_ACTIONS: readonly RemoteActionName[] = ['console', 'tunnel', 'copy', 'reload'];

export interface PortRange {
  lo: number;
  hi: number;
}

export interface ActionOptions {
  proto?: ('tcp' | 'udp')[];
  port?: PortRange[];
  dst?: string[];
  direction?: ('upload' | 'download')[];
  path?: string[];
  /** console: the local users the console may run as */
  user?: string[];
}

export interface ActionSpec {
  name: RemoteActionName;
  options: ActionOptions;
}

export interface ParsedResource {
  source: string;
  entity: Entity;
  action?: ActionSpec;
}

export class ResourceSyntaxError extends Error {
  constructor(
    readonly resource: string,
    readonly reason: string,
  ) {
    super(`resource "${printable(resource)}": ${reason}`);
  }
}

/** Shows a hostile string safely inside a message: control and invisible characters escaped, length capped. */
function printable(value: string): string {
  const capped = value.length > 80 ? `${value.slice(0, 80)}…` : value;
  return capped.replace(/[\p{Cc}\p{Cf}]/gu, (c) => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}`);
}

const OPTIONS_OF: Record<RemoteActionName, readonly (keyof ActionOptions)[]> = {
  console: ['user'],
  reload: [],
  tunnel: ['proto', 'port', 'dst'],
  copy: ['direction', 'path'],
};

/**
 * Normalises an absolute POSIX path on a device: resolves `.` and `..`, collapses duplicate
 * slashes, drops a trailing slash. Returns null for a relative path, a NUL byte or a backslash.
 * `..` above the root stays at the root, as the kernel does.
 */
export function normalizeDevicePath(input: string): string | null {
  if (typeof input !== 'string' || !input.startsWith('/') || input.includes('\0') || input.includes('\\')) return null;
  const out: string[] = [];
  for (const part of input.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') out.pop();
    else out.push(part);
  }
  return `/${out.join('/')}`;
}

/** True when `candidate` is `root` or lies below it. Both must be normalised already. */
export function pathWithin(root: string, candidate: string): boolean {
  if (root === '/') return candidate.startsWith('/');
  return candidate === root || candidate.startsWith(`${root}/`);
}

function parseEntity(resource: string, text: string): Entity {
  if (text === '*') return { kind: 'all' };
  if (text.startsWith('tag:')) {
    const tag = text.slice(4);
    if (!TAG_PATTERN.test(tag)) {
      throw new ResourceSyntaxError(resource, `"${printable(tag)}" is not a valid tag (${TAG_RULE})`);
    }
    return { kind: 'tag', tag };
  }
  if (text.startsWith('node:')) {
    const nodeId = text.slice(5);
    if (!NODE_ID_PATTERN.test(nodeId)) {
      throw new ResourceSyntaxError(resource, `"${printable(nodeId)}" is not a valid node id (letters, digits, "_", "-"; at most 64)`);
    }
    return { kind: 'node', nodeId };
  }
  throw new ResourceSyntaxError(resource, 'must be "*", "tag:<tag>" or "node:<node_id>", optionally followed by "/<action>"');
}

function parseOptionValue(resource: string, action: RemoteActionName, key: keyof ActionOptions, value: string, options: ActionOptions): void {
  const bad = (why: string) => new ResourceSyntaxError(resource, `${action} option ${key}: ${why}`);
  if (value === '') throw bad('empty value');
  switch (key) {
    case 'proto':
      if (value !== 'tcp' && value !== 'udp') throw bad(`"${printable(value)}" is not tcp or udp`);
      (options.proto ??= []).push(value);
      return;
    case 'port': {
      const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(value);
      if (!m) throw bad(`"${printable(value)}" is not a port or a range lo-hi`);
      const lo = Number(m[1]);
      const hi = m[2] === undefined ? lo : Number(m[2]);
      if (lo < 1 || hi > 65535 || lo > hi) throw bad(`"${value}" is outside 1-65535 or an empty range`);
      (options.port ??= []).push({ lo, hi });
      return;
    }
    case 'dst':
      if (!HOST_PATTERN.test(value)) throw bad(`"${printable(value)}" is not a host name or IP address`);
      (options.dst ??= []).push(value.toLowerCase().replace(/^\[(.*)\]$/, '$1'));
      return;
    case 'direction':
      if (value !== 'upload' && value !== 'download') throw bad(`"${printable(value)}" is not upload or download`);
      (options.direction ??= []).push(value);
      return;
    case 'path': {
      if (!value.startsWith('/')) throw bad(`"${printable(value)}" is not an absolute path`);
      if (value.split('/').some((part) => part === '..' || part === '.')) throw bad(`"${printable(value)}" contains "." or ".." segments`);
      // Control and invisible format characters (zero-width, bidi overrides) would make a grant read
      // differently than it matches; parentheses would make it read differently than it parses.
      if (/[\p{Cc}\p{Cf}\\()]/u.test(value)) throw bad('contains control or invisible characters, a backslash or a parenthesis');
      (options.path ??= []).push(normalizeDevicePath(value) as string);
      return;
    }
    case 'user':
      if (!LOGIN_USER_PATTERN.test(value)) throw bad(`"${printable(value)}" is not a user name (lower-case letters, digits, "_", "-"; at most 32)`);
      (options.user ??= []).push(value);
      return;
  }
}

/** Parses one resource string; throws ResourceSyntaxError saying what is wrong. */
export function parseResource(resource: string): ParsedResource {
  if (typeof resource !== 'string') throw new ResourceSyntaxError(String(resource), 'must be a string');
  if (resource.length === 0) throw new ResourceSyntaxError(resource, 'is empty');
  if (resource.length > MAX_RESOURCE_LENGTH) throw new ResourceSyntaxError(resource, `is longer than ${MAX_RESOURCE_LENGTH} characters`);
  if (/\s/.test(resource)) throw new ResourceSyntaxError(resource, 'contains white space');
  const slash = resource.indexOf('/');
  // A path option contains slashes too: the entity ends at the first slash, which is never inside it.
  const entityText = slash === -1 ? resource : resource.slice(0, slash);
  const entity = parseEntity(resource, entityText);
  if (slash === -1) return { source: resource, entity };
  const actionText = resource.slice(slash + 1);
  const m = /^([a-z]+)(?:\((.*)\))?$/s.exec(actionText);
  if (!m) throw new ResourceSyntaxError(resource, `"${printable(actionText)}" is not an action of the form name or name(options)`);
  const name = m[1] as RemoteActionName;
  if (!REMOTE_ACTIONS.includes(name)) {
    throw new ResourceSyntaxError(resource, `unknown action "${printable(m[1])}" (console, tunnel, copy or reload)`);
  }
  const options: ActionOptions = {};
  if (m[2] !== undefined) {
    if (OPTIONS_OF[name].length === 0) throw new ResourceSyntaxError(resource, `action ${name} takes no options`);
    if (m[2] === '') throw new ResourceSyntaxError(resource, 'empty option list; leave out the parentheses instead');
    const seen = new Set<string>();
    for (const option of m[2].split(';')) {
      const eq = option.indexOf('=');
      if (eq <= 0) throw new ResourceSyntaxError(resource, `"${printable(option)}" is not of the form key=value`);
      const key = option.slice(0, eq) as keyof ActionOptions;
      if (!OPTIONS_OF[name].includes(key)) {
        throw new ResourceSyntaxError(resource, `unknown option "${printable(key)}" for ${name} (allowed: ${OPTIONS_OF[name].join(', ')})`);
      }
      if (seen.has(key)) throw new ResourceSyntaxError(resource, `option ${key} is given twice`);
      seen.add(key);
      for (const value of option.slice(eq + 1).split(',')) parseOptionValue(resource, name, key, value, options);
    }
  }
  return { source: resource, entity, action: { name, options } };
}

export interface Policy {
  permission: string;
  resources?: string[];
}

export interface PolicyProblem {
  policy: number;
  permission: string;
  resource?: string;
  code: PolicyProblemCode;
  message: string;
}

/** Checks a role's policies; returns every problem found, each naming the policy and resource. */
export function validatePolicies(policies: Policy[]): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  const seen = new Set<string>();
  policies.forEach((policy, index) => {
    const permission = policy.permission;
    if (!isPermission(permission)) {
      problems.push({ policy: index, permission, code: 'unknown_permission', message: `unknown permission "${printable(String(permission))}"` });
      return;
    }
    if (seen.has(permission))
      problems.push({ policy: index, permission, code: 'duplicate_permission', message: `permission ${permission} is listed twice; merge its resources` });
    seen.add(permission);
    const resources = policy.resources;
    if (resources === undefined) return;
    if (resources.length > MAX_RESOURCES_PER_POLICY) {
      problems.push({ policy: index, permission, code: 'too_many_resources', message: `at most ${MAX_RESOURCES_PER_POLICY} resources per permission` });
      return;
    }
    const accepts = acceptsResources(permission);
    for (const resource of resources) {
      if (!accepts && resource !== '*') {
        problems.push({ policy: index, permission, resource, code: 'resources_not_accepted', message: `${permission} does not accept resources; only "*"` });
        continue;
      }
      try {
        const parsed = parseResource(resource);
        if (parsed.action && permission !== 'remote-access:connect') {
          problems.push({ policy: index, permission, resource, code: 'action_not_allowed', message: `action suffixes are only for remote-access:connect` });
        }
      } catch (err) {
        if (!(err instanceof ResourceSyntaxError)) throw err;
        problems.push({ policy: index, permission, resource, code: 'resource_syntax', message: err.message });
      }
    }
  });
  return problems;
}

export interface CompiledPolicy {
  permission: string;
  resources: ParsedResource[];
}

const ALL: ParsedResource = { source: '*', entity: { kind: 'all' } };

/** Parses policies for evaluation. Policies must have been validated; invalid resources are dropped. */
export function compilePolicies(policies: Policy[]): CompiledPolicy[] {
  return policies.map((policy) => ({
    permission: policy.permission,
    resources:
      policy.resources === undefined || policy.resources.length === 0
        ? [ALL]
        : policy.resources.flatMap((r) => {
            try {
              return [parseResource(r)];
            } catch {
              return [];
            }
          }),
  }));
}

/**
 * A remote-access:connect resource that allows a console, with the logins it names. Without
 * `user=` (`*`, `tag:x`, `tag:x/console`) the console opens the agent's own account: root on a
 * packaged install (the agent does not report which account it runs as).
 */
export interface ConsoleGrant {
  resource: string;
  /** the logins a console may run as; empty: the agent's own account */
  users: string[];
}

/** What a console through a grant without `user=` opens, in words for people. */
export const AGENT_ACCOUNT = 'the agent’s own account (root on a packaged install)';

/** The console grants of compiled policies (see ConsoleGrant). */
export function consoleGrants(policies: readonly CompiledPolicy[]): ConsoleGrant[] {
  return policies
    .filter((p) => p.permission === 'remote-access:connect')
    .flatMap((p) => p.resources)
    .filter((r) => r.action === undefined || r.action.name === 'console')
    .map((r) => ({ resource: r.source, users: r.action?.options.user ?? [] }));
}

/** What the evaluator needs to know of a device. */
export interface DeviceScope {
  deviceId: string;
  /** The device's own node id and the node ids of every group above it. */
  nodeIds: string[];
  /** The device's tags and the tags of every group above it. */
  tags: string[];
}

export type RemoteRequest =
  /** user: the local user to run as; without it, the agent's own user, which only an unrestricted grant allows */
  | { action: 'console'; user?: string }
  | { action: 'reload' }
  | { action: 'tunnel'; proto: 'tcp' | 'udp'; port: number; dst: string }
  | { action: 'copy'; direction: 'upload' | 'download'; path: string };

export interface Decision {
  allowed: boolean;
  /** What code branches on. */
  code: DecisionCode;
  /** The same for people (and the audit log). */
  reason: string;
  /** The resource that granted access. */
  matched?: string;
}

export function entityMatches(entity: Entity, device: DeviceScope): boolean {
  switch (entity.kind) {
    case 'all':
      return true;
    case 'tag':
      return device.tags.includes(entity.tag);
    case 'node':
      return device.nodeIds.includes(entity.nodeId);
  }
}

function actionAllows(action: ActionSpec, request: RemoteRequest): boolean {
  if (action.name !== request.action) return false;
  const o = action.options;
  if (request.action === 'tunnel') {
    if (o.proto && !o.proto.includes(request.proto)) return false;
    if (o.port && !o.port.some((r) => request.port >= r.lo && request.port <= r.hi)) return false;
    if (o.dst) {
      const dst = request.dst.toLowerCase().replace(/^\[(.*)\]$/, '$1');
      if (!o.dst.includes('*') && !o.dst.includes(dst)) return false;
    }
    return true;
  }
  if (request.action === 'copy') {
    if (o.direction && !o.direction.includes(request.direction)) return false;
    if (o.path) {
      const wanted = normalizeDevicePath(request.path);
      if (wanted === null) return false;
      if (!o.path.some((root) => pathWithin(root, wanted))) return false;
    }
    return true;
  }
  if (request.action === 'console') {
    // A grant naming users allows only those: never the agent's own user by default, which may be root.
    if (o.user && (request.user === undefined || !o.user.includes(request.user))) return false;
    return true;
  }
  return true;
}

export function describeRequest(request: RemoteRequest): string {
  switch (request.action) {
    case 'tunnel':
      return `tunnel ${request.proto} to ${request.dst}:${request.port}`;
    case 'copy':
      return `copy (${request.direction}) ${request.path}`;
    case 'console':
      return request.user === undefined ? 'console' : `console as ${request.user}`;
    default:
      return request.action;
  }
}

/**
 * May a holder of `policies` use `permission` — on `device` when given, and for the remote
 * `request` when given? Resources are OR'ed within a policy and policies of all roles are a union.
 * Without a device, the question is whether the permission is held at all.
 */
export function evaluate(policies: CompiledPolicy[], permission: string, device?: DeviceScope, request?: RemoteRequest): Decision {
  const relevant = policies.filter((p) => p.permission === permission);
  if (relevant.length === 0) return { allowed: false, code: 'no_permission', reason: `no role grants ${permission}` };
  if (!device) return { allowed: true, code: 'allowed', reason: 'permission held', matched: relevant[0].resources[0]?.source };
  let deviceMatched = false;
  let actionMatched = false;
  for (const policy of relevant) {
    for (const resource of policy.resources) {
      if (!entityMatches(resource.entity, device)) continue;
      deviceMatched = true;
      if (!resource.action || !request) return { allowed: true, code: 'allowed', reason: 'granted', matched: resource.source };
      if (actionAllows(resource.action, request)) return { allowed: true, code: 'allowed', reason: 'granted', matched: resource.source };
      if (resource.action.name === request.action) actionMatched = true;
    }
  }
  if (!deviceMatched) return { allowed: false, code: 'outside_resources', reason: `device is outside every resource of ${permission}` };
  return {
    allowed: false,
    code: actionMatched ? 'option_not_granted' : 'action_not_granted',
    reason: `no grant of ${permission} allows ${request ? describeRequest(request) : 'this'} on this device${
      request?.action === 'console' && request.user === undefined && actionMatched ? ' (the grant names the users a console may run as: choose one)' : ''
    }`,
  };
}

export interface UncoveredGrant {
  permission: string;
  resource: string;
}

/**
 * What of `wanted` the holder of `held` does not hold themself: a user may grant (in a role, or by
 * assigning a role) only permissions they hold, on all devices or on the very same resource.
 * This keeps users:manage or roles:manage from being a path to more access than one has.
 */
export function uncoveredGrants(held: CompiledPolicy[], wanted: Policy[]): UncoveredGrant[] {
  const missing: UncoveredGrant[] = [];
  for (const policy of wanted) {
    const resources = policy.resources === undefined || policy.resources.length === 0 ? ['*'] : policy.resources;
    const mine = held.filter((p) => p.permission === policy.permission).flatMap((p) => p.resources.map((r) => r.source));
    for (const resource of resources) {
      if (!mine.includes('*') && !mine.includes(resource)) missing.push({ permission: policy.permission, resource });
    }
  }
  return missing;
}
