import { acceptsResources, type Permission } from '../../shared/permissions.js';
import { entityMatches, evaluate, uncoveredGrants, type Decision, type DeviceScope, type Policy, type RemoteRequest } from '../../shared/resources.js';
import { ApiError, forbidden, notFound } from '../http/errors.js';
import type { Principal } from './principal.js';

/** Finds where a device sits: its node ids up the tree and its inherited tags. */
export interface DeviceScopeSource {
  scopeOf(deviceId: string): Promise<DeviceScope | undefined>;
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

  /** For listings: may the principal see this device under `permission`? */
  canSee(principal: Principal, permission: Permission, device: DeviceScope): boolean {
    return evaluate(principal.policies, permission, device).allowed;
  }
}
