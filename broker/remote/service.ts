import type { RemoteCapabilities } from '../../shared/api-types.js';
import type { Permission } from '../../shared/permissions.js';
import { entityMatches, parseResource, REMOTE_ACTIONS, type RemoteActionName } from '../../shared/resources.js';
import type { Principal } from '../access/principal.js';
import { ApiError, badRequest, forbidden, notFound } from '../http/errors.js';
import type { Services } from '../services.js';
import { PortmapStore, type Portmap, type PortmapInput } from './portmaps.js';
import { RemoteSessions, type RemoteSource } from './sessions.js';
import { TicketStore } from './tickets.js';

/**
 * Remote access: the WebSocket sessions (console, tunnel, copy — see sessions.ts), tickets for
 * browsers, the agent reload, and the port presets. Every attempt is decided by the access
 * service and audited before it starts.
 */
export class RemoteService {
  readonly tickets = new TicketStore();
  readonly sessions: RemoteSessions;
  private readonly portmaps: PortmapStore;

  constructor(private readonly s: Services) {
    this.sessions = new RemoteSessions(s, (ticket) => this.tickets.redeem(ticket));
    this.portmaps = new PortmapStore(s.store.db);
  }

  async init(): Promise<void> {
    this.sessions.init();
  }

  async close(): Promise<void> {
    await this.sessions.close();
  }

  /** A single-use ticket for one WebSocket connection, bound to the caller's sign-in session. */
  issueTicket(principal: Principal, bearer: string): { ticket: string; expires_in: number } {
    return this.tickets.issue(bearer, principal.user.id);
  }

  /**
   * What the caller may try on a device, for showing buttons: each action is granted by some
   * remote-access:connect resource matching the device, whatever its options. The session itself
   * is still decided with its options when it is opened.
   */
  async capabilities(principal: Principal, deviceId: string): Promise<RemoteCapabilities> {
    const answer: RemoteCapabilities = {
      device_id: deviceId,
      connected: this.s.agents.isConnected(deviceId),
      console: false,
      tunnel: false,
      copy: false,
      reload: false,
    };
    const decision = await this.s.access.decide(principal, 'remote-access:connect', deviceId);
    if (!decision.allowed || !decision.device) return answer;
    const granted = new Set<RemoteActionName>();
    for (const policy of principal.policies) {
      if (policy.permission !== 'remote-access:connect') continue;
      for (const resource of policy.resources) {
        if (!entityMatches(resource.entity, decision.device)) continue;
        if (!resource.action) REMOTE_ACTIONS.forEach((a) => granted.add(a));
        else granted.add(resource.action.name);
      }
    }
    for (const action of granted) answer[action] = true;
    return answer;
  }

  /** Restarts the agent's work loop: decided as the `reload` action, audited, then asked of the agent. */
  async reload(principal: Principal, deviceId: string, ip: string, source: RemoteSource): Promise<{ ok: true; device_id: string }> {
    const decision = await this.s.access.decide(principal, 'remote-access:connect', deviceId, { action: 'reload' });
    let auditId: number;
    try {
      auditId = await this.s.audit.recordRemoteStart({
        event: 'remote.reload',
        user: principal.user,
        deviceId,
        action: 'reload',
        options: {},
        allowed: decision.allowed,
        reason: decision.reason,
        ip,
        source,
        sessionId: principal.sessionId,
      });
    } catch {
      throw new ApiError(500, 'audit_failed', 'The attempt could not be written to the audit log, so it was refused. Try again shortly.');
    }
    if (!decision.allowed) {
      if (decision.reason === 'no such device') throw notFound(`Device ${deviceId}`);
      throw forbidden(`Not allowed: ${decision.reason}.`, { permission: 'remote-access:connect', device_id: deviceId });
    }
    const started = Date.now();
    const end = (reason: string, result: 'ended' | 'error' = 'ended') =>
      this.s.audit.recordRemoteEnd(auditId, { durationMs: Date.now() - started, bytesIn: 0, bytesOut: 0, reason, result }).catch(() => {});
    if (!this.s.agents.isConnected(deviceId)) {
      await end('device not connected', 'error');
      throw new ApiError(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, {
        device_id: deviceId,
      });
    }
    try {
      await this.s.agents.reload(deviceId);
    } catch (err) {
      await end(`reload failed: ${(err as Error).message}`, 'error');
      throw new ApiError(502, 'reload_failed', (err as Error).message, { device_id: deviceId });
    }
    await end('acknowledged by the agent');
    return { ok: true, device_id: deviceId };
  }

  // ---- port presets -------------------------------------------------------------------------------

  /**
   * Presets that apply to a device (its own node, a group above it, one of its tags, or `*`), for
   * callers who may connect to it or read it; without a device, every preset.
   */
  async listPortmaps(
    principal: Principal,
    query: { device_id?: string; offset: number; items_per_page: number },
  ): Promise<{ items: Portmap[]; total: number }> {
    let all = await this.portmaps.all();
    if (query.device_id) {
      let decision = await this.s.access.decide(principal, 'remote-access:connect', query.device_id);
      if (!decision.allowed) decision = await this.s.access.decide(principal, 'device:read', query.device_id);
      if (!decision.allowed) {
        if (decision.reason === 'no such device') throw notFound(`Device ${query.device_id}`);
        throw forbidden(`Not allowed: ${decision.reason}.`, { permission: 'remote-access:connect', device_id: query.device_id });
      }
      const device = decision.device;
      all = device ? all.filter((p) => entityMatches(parseResource(p.target).entity, device)) : [];
    } else {
      // Like other listings, what the caller may not see is left out rather than refused.
      const readers: Permission[] = ['remote-access:connect', 'device:read', 'remote-access:manage'];
      if (!readers.some((p) => principal.has(p))) all = [];
    }
    return { items: all.slice(query.offset, query.offset + query.items_per_page), total: all.length };
  }

  async createPortmap(principal: Principal, input: PortmapInput): Promise<Portmap> {
    return this.portmaps.insert(checkedTarget(input), principal.user.id);
  }

  async updatePortmap(id: string, patch: Partial<PortmapInput>): Promise<Portmap> {
    const updated = await this.portmaps.update(id, checkedTarget(patch));
    if (!updated) throw notFound(`Port preset ${id}`);
    return updated;
  }

  async deletePortmap(id: string): Promise<void> {
    if (!(await this.portmaps.remove(id))) throw notFound(`Port preset ${id}`);
  }
}

/** A preset targets devices like a resource does, without an action. */
function checkedTarget<T extends { target?: string }>(input: T): T {
  if (input.target === undefined) return input;
  let parsed;
  try {
    parsed = parseResource(input.target);
  } catch (err) {
    throw badRequest(`body.target: ${(err as Error).message}`, { field: 'target' });
  }
  if (parsed.action) throw badRequest('body.target: a preset targets devices ("*", "tag:<tag>" or "node:<id>"), without an action.', { field: 'target' });
  return input;
}
