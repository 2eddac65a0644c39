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
  type RemoteRequest,
} from '../../shared/resources.js';
import { ApiError, forbidden, notFound } from '../http/errors.js';
import type { Principal } from './principal.js';

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

  /** The decision, without throwing. Unknown devices are denied with reason "no such device". */
  async decide(principal: Principal, permission: Permission, deviceId?: string, request?: RemoteRequest): Promise<AccessDecision> {
    if (!principal.has(permission)) return { allowed: false, reason: `no role grants ${permission}` };
    if (deviceId === undefined || !acceptsResources(permission)) return evaluate(principal.policies, permission);
    const device = await this.devices.scopeOf(deviceId);
    if (!device) return { allowed: false, reason: 'no such device' };
    return { ...evaluate(principal.policies, permission, device, request), device };
  }

  /** Throws 403 (or 404 for an unknown device, once the permission itself is held). */
  async require(principal: Principal, permission: Permission, deviceId?: string): Promise<void> {
    const decision = await this.decide(principal, permission, deviceId);
    if (decision.allowed) return;
    if (decision.reason === 'no such device') throw notFound(`Device ${deviceId}`);
    throw forbidden(`Not allowed: ${decision.reason}.`, { permission, ...(deviceId ? { device_id: deviceId } : {}) });
  }

  /** Granting (in a role, or by assigning roles): only what the granter holds. Throws 403 otherwise. */
  requireGrantable(principal: Principal, wanted: Policy[]): void {
    const missing = uncoveredGrants(principal.policies, wanted);
    if (missing.length === 0) return;
    const shown = missing
      .slice(0, 5)
      .map((m) => `${m.permission} on ${m.resource}`)
      .join(', ');
    throw new ApiError(403, 'privilege_escalation', `You can only grant what you hold yourself; you do not hold ${shown}${missing.length > 5 ? ', …' : ''}.`, {
      missing,
    });
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

  /** For listings: may the principal see this device under `permission`? */
  canSee(principal: Principal, permission: Permission, device: DeviceScope): boolean {
    return evaluate(principal.policies, permission, device).allowed;
  }
}
