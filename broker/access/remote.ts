/**
 * Remote-access questions that go beyond one yes or no, answered from the principal's policies
 * with the shared evaluator: which actions to offer on a device, and which directories a copy may
 * touch (handed to the agent for its own check).
 */
import {
  entityMatches,
  evaluate,
  parseResource,
  REMOTE_ACTIONS,
  type CompiledPolicy,
  type DeviceScope,
  type RemoteActionName,
  type RemoteRequest,
} from '../../shared/resources.js';

const CONNECT = 'remote-access:connect';
const MANAGE = 'remote-access:manage';

/**
 * The actions some remote-access:connect resource matching the device grants, whatever their
 * options (for showing buttons). A resource without an action grants every action.
 */
export function grantedRemoteActions(policies: CompiledPolicy[], device: DeviceScope): Set<RemoteActionName> {
  const granted = new Set<RemoteActionName>();
  for (const policy of policies) {
    if (policy.permission !== CONNECT) continue;
    for (const resource of policy.resources) {
      if (!entityMatches(resource.entity, device)) continue;
      if (!resource.action) REMOTE_ACTIONS.forEach((a) => granted.add(a));
      else granted.add(resource.action.name);
    }
  }
  return granted;
}

/**
 * The local users a console on the device may run as, for offering a choice: undefined when some
 * grant allows a console without naming users (any user, and the agent's own by default);
 * otherwise the users named by the grants, in order, and the client must name one of them.
 */
export function consoleUsers(policies: CompiledPolicy[], device: DeviceScope): string[] | undefined {
  const users: string[] = [];
  for (const policy of policies) {
    if (policy.permission !== CONNECT) continue;
    for (const resource of policy.resources) {
      if (!entityMatches(resource.entity, device)) continue;
      if (resource.action && resource.action.name !== 'console') continue;
      const named = resource.action?.options.user;
      if (!named) return undefined;
      for (const u of named) if (!users.includes(u)) users.push(u);
    }
  }
  return users;
}

/**
 * The directories a copy may touch, for the agent's own check: the `path` roots of every grant
 * that allows this request on this device, or undefined when one of them has no path limit.
 * Each grant is asked through the shared evaluator, one resource at a time.
 */
export function allowedCopyRoots(policies: CompiledPolicy[], device: DeviceScope, request: RemoteRequest): string[] | undefined {
  const roots = new Set<string>();
  for (const policy of policies) {
    if (policy.permission !== CONNECT) continue;
    for (const resource of policy.resources) {
      if (!evaluate([{ permission: policy.permission, resources: [resource] }], policy.permission, device, request).allowed) continue;
      const paths = resource.action?.options.path;
      if (!paths) return undefined;
      for (const p of paths) roots.add(p);
    }
  }
  return [...roots];
}

/**
 * The directories the caller may read on the device (download grants' `path` roots), for a file
 * browser to start in: undefined when some grant reads anywhere, [] when none reads at all.
 */
export function copyBrowseRoots(policies: CompiledPolicy[], device: DeviceScope): string[] | undefined {
  const roots: string[] = [];
  for (const policy of policies) {
    if (policy.permission !== CONNECT) continue;
    for (const resource of policy.resources) {
      if (!entityMatches(resource.entity, device)) continue;
      if (resource.action && resource.action.name !== 'copy') continue;
      const direction = resource.action?.options.direction;
      if (direction && !direction.includes('download')) continue;
      const paths = resource.action?.options.path;
      if (!paths) return undefined;
      for (const p of paths) if (!roots.includes(p)) roots.push(p);
    }
  }
  return roots;
}

/** Does a port preset's target (`*`, `tag:` or `node:`, as a resource without an action) cover the device? */
export function presetApplies(target: string, device: DeviceScope): boolean {
  return entityMatches(parseResource(target).entity, device);
}

/**
 * May the caller see a live remote session (the operator's list)? Their own sessions always;
 * others' where their `remote-access:manage` covers the session's device (a `*` grant, as an
 * Administrator holds, covers every device). Ending a session needs that grant whoever owns it.
 */
export function maySeeRemoteSession(policies: CompiledPolicy[], viewerId: string, session: { userId: string; device: DeviceScope | undefined }): boolean {
  if (session.userId === viewerId) return true;
  if (!session.device) return policies.some((p) => p.permission === MANAGE && p.resources.some((r) => r.entity.kind === 'all'));
  return evaluate(policies, MANAGE, session.device).allowed;
}

/**
 * May the caller watch a live console read-only? Besides what opening that console needs (a
 * remote-access:connect grant for the device and the local user it runs as, asked by the caller),
 * the session must be one they may see: their own, or on a device their remote-access:manage
 * covers. Watching shows everything the owner types and reads, so it is a supervisor's right.
 */
export function mayWatchRemoteSession(policies: CompiledPolicy[], viewerId: string, session: { userId: string; device: DeviceScope | undefined }): boolean {
  return maySeeRemoteSession(policies, viewerId, session);
}
