import { acceptsResources, type Permission } from '../../shared/permissions.js';
import { evaluate, uncoveredGrants, type Decision, type DeviceScope, type Policy, type RemoteRequest } from '../../shared/resources.js';
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
    throw new ApiError(
      403,
      'privilege_escalation',
      `${refusal}: that needs every permission held there, and you do not hold ${shown}${missing.length > 5 ? ', …' : ''}; ask someone who does.`,
      { missing },
    );
  }

  /** For listings: may the principal see this device under `permission`? */
  canSee(principal: Principal, permission: Permission, device: DeviceScope): boolean {
    return evaluate(principal.policies, permission, device).allowed;
  }
}
