import { acceptsResources, type Permission } from '../../shared/permissions.js';
import {
  entityMatches,
  evaluate,
  parseResource,
  uncoveredGrants,
  type Decision,
  type DeviceScope,
  type Entity,
  type Policy,
  type RemoteActionName,
  type RemoteRequest,
} from '../../shared/resources.js';
import { DomainError, forbidden, notFound } from '../errors.js';
import type { Principal } from './principal.js';
import { consoleRecordingMode, type RecordingMode } from './recording.js';
import { allowedCopyRoots, consoleUsers, copyBrowseRoots, grantedRemoteActions, maySeeRemoteSession, mayWatchRemoteSession } from './remote.js';

const PRESET_READERS: Permission[] = ['remote-access:connect', 'device:read', 'remote-access:manage'];

/** Finds where a device sits: its node ids up the tree and its inherited tags. */
export interface DeviceScopeSource {
  scopeOf(deviceId: string): Promise<DeviceScope | undefined>;
  /** The same for any node, group or device: its node ids up the tree and the tags it carries or inherits. */
  scopeOfNode(nodeId: string): Promise<DeviceScope | undefined>;
}

export interface AccessDecision extends Decision {
  device?: DeviceScope;
}

/**
 * The one place that decides access. Routes declare their permission and the device they concern;
 * remote access asks with the action and its options. Nothing else decides.
 */
export class AccessService {
  constructor(private readonly devices: DeviceScopeSource) {}

  /** The decision, without throwing. Unknown devices are denied with code `no_such_device`. */
  async decide(principal: Principal, permission: Permission, deviceId?: string, request?: RemoteRequest): Promise<AccessDecision> {
    if (!principal.has(permission)) return { allowed: false, code: 'no_permission', reason: `no role grants ${permission}` };
    if (deviceId === undefined || !acceptsResources(permission)) return evaluate(principal.policies, permission);
    const device = await this.devices.scopeOf(deviceId);
    if (!device) return { allowed: false, code: 'no_such_device', reason: 'no such device' };
    return { ...evaluate(principal.policies, permission, device, request), device };
  }

  /** Throws 403 (or 404 for an unknown device, once the permission itself is held). */
  async require(principal: Principal, permission: Permission, deviceId?: string): Promise<void> {
    const decision = await this.decide(principal, permission, deviceId);
    if (decision.allowed) return;
    throw refusalOf(decision, permission, deviceId);
  }

  /** Granting (in a role, or by assigning roles): only what the granter holds. Throws 403 otherwise. */
  requireGrantable(principal: Principal, wanted: Policy[]): void {
    const missing = uncoveredGrants(principal.policies, wanted);
    if (missing.length === 0) return;
    const shown = missing
      .slice(0, 5)
      .map((m) => `${m.permission} on ${m.resource}`)
      .join(', ');
    throw new DomainError(
      'forbidden',
      'privilege_escalation',
      `You can only grant what you hold yourself; you do not hold ${shown}${missing.length > 5 ? ', …' : ''}.`,
      {
        missing,
      },
    );
  }

  /**
   * Acting on other users' sign-in (password, email, second factor, enabled state, removal, a reset
   * link, the account's second-factor policy): only on users who hold nothing the actor lacks — the
   * rule of `requireGrantable` applied to everything they hold — or the actor could take over, or
   * weaken, a stronger account. `refusal` says what was refused ("You cannot … of x@example.com").
   * Throws 403 `privilege_escalation` otherwise.
   */
  requireOutranks(principal: Principal, theirPolicies: Policy[], refusal: string): void {
    const missing = uncoveredGrants(principal.policies, theirPolicies);
    if (missing.length === 0) return;
    const shown = missing
      .slice(0, 5)
      .map((m) => `${m.permission} on ${m.resource}`)
      .join(', ');
    throw new DomainError(
      'forbidden',
      'privilege_escalation',
      `${refusal}: that needs every permission held there, and you do not hold ${shown}${missing.length > 5 ? ', …' : ''}; ask someone who does.`,
      { missing },
    );
  }

  /**
   * Bootstrap key secrets enrol devices, so they are shown to those who may manage keys; holders of
   * only bootstrap-keys:read see a key's id, group and auto-accept.
   */
  async canReadBootstrapSecrets(principal: Principal): Promise<boolean> {
    return (await this.decide(principal, 'bootstrap-keys:manage')).allowed;
  }

  /**
   * Does the principal's grant of `permission` cover every device a resource string (`*`, `tag:x`,
   * `node:n`, no action) names, now and later? `*` is covered only by `*`; `tag:x` by `*` or `tag:x`;
   * `node:n` by `*`, by `node:m` with n at or below m, or by a tag n carries or inherits (every
   * device below n inherits it). An unknown node is covered only by `*`. For calls that concern a
   * set of devices rather than one (port presets).
   */
  async coversTarget(principal: Principal, permission: Permission, target: string): Promise<boolean> {
    let entity: Entity;
    try {
      entity = parseResource(target).entity;
    } catch {
      return false;
    }
    const grants = principal.policies.filter((p) => p.permission === permission).flatMap((p) => p.resources.map((r) => r.entity));
    if (grants.some((g) => g.kind === 'all')) return true;
    if (entity.kind === 'all') return false;
    if (entity.kind === 'tag') return grants.some((g) => g.kind === 'tag' && g.tag === entity.tag);
    const scope = await this.devices.scopeOfNode(entity.nodeId);
    return scope !== undefined && grants.some((g) => entityMatches(g, scope));
  }

  /** Throws 403 unless the principal's grant of `permission` covers `target` (see coversTarget). */
  async requireTarget(principal: Principal, permission: Permission, target: string): Promise<void> {
    if (!principal.has(permission)) throw forbidden(`Not allowed: no role grants ${permission}.`, { permission });
    if (await this.coversTarget(principal, permission, target)) return;
    throw forbidden(`Not allowed: "${target}" reaches devices outside your ${permission} resources.`, { permission, target });
  }

  /**
   * For listings of many devices (the group tree): `canSee` as one predicate, with the principal's
   * resources for `permission` looked up once and nothing allocated per device.
   */
  seer(principal: Principal, permission: Permission): (device: DeviceScope) => boolean {
    const entities = principal.policies.filter((p) => p.permission === permission).flatMap((p) => p.resources.map((r) => r.entity));
    return (device) => {
      for (const entity of entities) if (entityMatches(entity, device)) return true;
      return false;
    };
  }

  /**
   * Does the principal's grant of `permission` reach every device, now and later (a `*` resource
   * without an action)? Lets a listing skip naming the devices one by one.
   */
  reachesEveryDevice(principal: Principal, permission: Permission): boolean {
    if (!principal.has(permission)) return false;
    return principal.policies.some((p) => p.permission === permission && p.resources.some((r) => r.entity.kind === 'all' && !r.action));
  }

  /** For listings: may the principal see this device under `permission`? */
  canSee(principal: Principal, permission: Permission, device: DeviceScope): boolean {
    return evaluate(principal.policies, permission, device).allowed;
  }

  /**
   * May the principal manage (create in, rename, move, delete, tag) the group with this scope?
   * Tags do not grant group management: only `*` and node: resources at or above the group.
   */
  mayManageGroup(principal: Principal, group: DeviceScope): boolean {
    return evaluate(principal.policies, 'device:manage', { ...group, tags: [] }).allowed;
  }

  /**
   * For showing manage controls on a whole tree (GET /grouptree?manage_hints=true): one predicate
   * answering, per node scope, whether the principal may rename, move, tag (and, for a group,
   * delete or create in) it — groups as mayManageGroup, devices by their device:manage resources.
   * undefined without device:manage. The calls themselves still decide each change.
   */
  treeManager(principal: Principal): ((node: DeviceScope, type: 'group' | 'device') => boolean) | undefined {
    if (!principal.has('device:manage')) return undefined;
    const device = this.seer(principal, 'device:manage');
    // A scope only `*` matches: a manager of everything needs no question per node.
    if (device({ deviceId: '', nodeIds: [], tags: [] })) return () => true;
    return (node, type) => (type === 'group' ? this.mayManageGroup(principal, node) : device(node));
  }

  /**
   * The tags the principal may add to or remove from nodes they manage, for showing: `'*'` for any
   * tag, else those named by their device:manage `tag:` resources (see mayManageTag).
   */
  manageableTags(principal: Principal): '*' | string[] {
    if (this.mayManageTag(principal, '')) return '*';
    const named = principal.policies
      .filter((p) => p.permission === 'device:manage')
      .flatMap((p) => p.resources.map((r) => r.entity))
      .flatMap((e) => (e.kind === 'tag' ? [e.tag] : []));
    return [...new Set(named)].filter((tag) => this.mayManageTag(principal, tag)).sort();
  }

  /**
   * May the principal add or remove this tag? Only when their device:manage covers a device
   * carrying just this tag (a `tag:` resource naming it, or `*`): otherwise tagging would widen
   * what other permissions, keyed on tags, reach.
   */
  mayManageTag(principal: Principal, tag: string): boolean {
    return evaluate(principal.policies, 'device:manage', { deviceId: '', nodeIds: [], tags: [tag] }).allowed;
  }

  /**
   * What the caller may try on a device, for showing buttons: each action granted by some
   * remote-access:connect resource matching the device, whatever its options (none when the
   * device is outside them). A session itself is still decided with its options when opened.
   */
  async remoteActions(principal: Principal, deviceId: string): Promise<Set<RemoteActionName>> {
    const decision = await this.decide(principal, 'remote-access:connect', deviceId);
    if (!decision.allowed || !decision.device) return new Set();
    return grantedRemoteActions(principal.policies, decision.device);
  }

  /** Whom a console on the device may run as (see consoleUsers); undefined also when no console is granted. */
  async consoleUsers(principal: Principal, deviceId: string): Promise<string[] | undefined> {
    const decision = await this.decide(principal, 'remote-access:connect', deviceId, { action: 'console' });
    if (decision.allowed || !decision.device) return undefined;
    const users = consoleUsers(principal.policies, decision.device);
    return users && users.length > 0 ? users : undefined;
  }

  /** Where the caller may read files on the device (see copyBrowseRoots); undefined also when no copy is granted. */
  async copyBrowseRoots(principal: Principal, deviceId: string): Promise<string[] | undefined> {
    const decision = await this.decide(principal, 'remote-access:connect', deviceId, { action: 'copy', direction: 'download', path: '/' });
    if (!decision.device) return undefined;
    return copyBrowseRoots(principal.policies, decision.device);
  }

  /**
   * The device whose port presets the caller may read: one they may connect to or read. Throws
   * 404 for an unknown device (once a permission is held), 403 otherwise.
   */
  async requirePresetReader(principal: Principal, deviceId: string): Promise<DeviceScope | undefined> {
    let decision = await this.decide(principal, 'remote-access:connect', deviceId);
    if (!decision.allowed) decision = await this.decide(principal, 'device:read', deviceId);
    if (!decision.allowed) throw refusalOf(decision, 'remote-access:connect', deviceId);
    return decision.device;
  }

  /**
   * For a listing without a device: may the principal see a preset with this target? Presets for
   * every device go to holders of a permission that uses them; others only where a reading grant
   * covers the target (see coversTarget), so no hidden group's preset shows.
   */
  async mayReadPreset(principal: Principal, target: string): Promise<boolean> {
    const readers = PRESET_READERS.filter((p) => principal.has(p));
    if (target === '*') return readers.length > 0;
    for (const permission of readers) if (await this.coversTarget(principal, permission, target)) return true;
    return false;
  }

  /**
   * The permission whose resources limit which devices' inventory a caller reaches: always
   * device:read. inventory:read accepts no resources, so it says what may be read, never where: the
   * devices are those device:read's resources reach, and none without device:read. Nothing is
   * inferred from a permission's absence, so taking device:read away never widens what
   * inventory:read reaches (the property test in access.test.ts).
   */
  inventoryScope(_principal: Principal): 'device:read' | 'inventory:read' {
    return 'device:read';
  }

  /**
   * The permission whose resources limit which devices' CVE findings a caller reaches (host lists
   * and counts): device:read, as inventoryScope (none without it). Undefined when device:read
   * reaches every device, so a listing need not name them one by one.
   */
  cveScope(principal: Principal): 'device:read' | undefined {
    if (this.reachesEveryDevice(principal, 'device:read')) return undefined;
    return 'device:read';
  }

  /**
   * Configuration: may the principal read or change the configuration of this node or tag?
   * configuration:read and configuration:manage accept resources (an extension of qbee's list; none
   * means `*`), and their reach is their own resources only (coversTarget: `node:<id>` covered by
   * `*`, a node at or above it or a tag it carries; `tag:<t>` by `*` or that tag) — never another
   * permission's, so holding or dropping device:read changes nothing here.
   */
  async mayConfigure(
    principal: Principal,
    permission: 'configuration:read' | 'configuration:manage',
    entity: { type: 'node' | 'tag'; id: string },
  ): Promise<boolean> {
    if (!principal.has(permission)) return false;
    return this.coversTarget(principal, permission, `${entity.type}:${entity.id}`);
  }

  /** Throws 403 unless mayConfigure. */
  async requireConfigEntity(
    principal: Principal,
    permission: 'configuration:read' | 'configuration:manage',
    entity: { type: 'node' | 'tag'; id: string },
  ): Promise<void> {
    if (await this.mayConfigure(principal, permission, entity)) return;
    if (!principal.has(permission)) throw forbidden(`Not allowed: no role grants ${permission}.`, { permission });
    throw forbidden(`Not allowed: the configuration of ${entity.type} ${entity.id} reaches devices outside your ${permission} resources.`, {
      permission,
      [entity.type === 'node' ? 'node_id' : 'tag']: entity.id,
    });
  }

  /**
   * The permission whose resources limit which devices' metrics a caller reaches, in a device's
   * series and in fleet aggregations (analysis, organisation statistics): always device:read.
   * metrics:read and analysis:read accept no resources, so they say what may be read, never where:
   * the devices are those device:read's resources reach, and none without it (as inventoryScope).
   */
  fleetScope(_principal: Principal, _permission: 'metrics:read' | 'analysis:read'): Permission {
    return 'device:read';
  }

  /**
   * May the principal see this live remote session in the operator's list? Their own, and those
   * on devices their `remote-access:manage` covers (see maySeeRemoteSession).
   */
  async maySeeRemoteSession(principal: Principal, session: { userId: string; deviceId: string }): Promise<boolean> {
    if (session.userId === principal.user.id) return true;
    if (!principal.has('remote-access:manage')) return false;
    const device = await this.devices.scopeOf(session.deviceId);
    return maySeeRemoteSession(principal.policies, principal.user.id, { userId: session.userId, device });
  }

  /**
   * May the caller watch a live console read-only (see mayWatchRemoteSession in ./remote.ts)?
   * They must be allowed to open that same console (the device, and the local user it runs as)
   * and to see the session: their own, or on a device their remote-access:manage covers.
   */
  async mayWatchRemoteSession(principal: Principal, session: { userId: string; deviceId: string; request: RemoteRequest }): Promise<AccessDecision> {
    const open = await this.decide(principal, 'remote-access:connect', session.deviceId, session.request);
    if (!open.allowed) return open;
    const device = open.device ?? (await this.devices.scopeOf(session.deviceId));
    return mayWatchRemoteSession(principal.policies, principal.user.id, { userId: session.userId, device })
      ? open
      : { allowed: false, code: 'no_permission', reason: "watching another user's console needs remote-access:manage on its device" };
  }

  /** Whether this console (its device, the local user it runs as) is recorded for the principal: from their roles (broker/access/recording.ts). */
  consoleRecording(principal: Principal, device: DeviceScope, request: Extract<RemoteRequest, { action: 'console' }>): RecordingMode {
    return consoleRecordingMode(principal.roles, device, request);
  }

  /** The directories an allowed copy may touch (undefined: no path limit), for the agent's own check. */
  copyRoots(principal: Principal, device: DeviceScope, request: RemoteRequest): string[] | undefined {
    return allowedCopyRoots(principal.policies, device, request);
  }
}

/** The API error for a refused decision: 404 for an unknown device, else 403 with the reason. */
export function refusalOf(decision: Decision, permission: Permission, deviceId?: string): DomainError {
  if (decision.code === 'no_such_device') return notFound(`Device ${deviceId}`);
  return forbidden(`Not allowed: ${decision.reason}.`, { permission, ...(deviceId ? { device_id: deviceId } : {}) });
}
