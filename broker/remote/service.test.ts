/**
 * RemoteService built from fakes through its constructor: a fake AgentLocator, a fake audit trail,
 * the real AccessService over a fake device scope source. Nothing is patched after the fact.
 */
import { describe, expect, it } from 'vitest';
import { compilePolicies, type Policy } from '../../shared/resources.js';
import { AccessService } from '../access/access.js';
import { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { RemoteAuditStart } from '../audit/service.js';
import type { Db } from '../db/database.js';
import { createLogger } from '../logger.js';
import { RemoteService } from './service.js';

const DEVICE = 'a'.repeat(64);

function principal(policies: Policy[]): Principal {
  return new Principal({ id: 'u1', email: 'u@example.com', fname: 'U', lname: 'One' }, 's1', compilePolicies(policies));
}

function build(agent: { connected: boolean; reload?: () => Promise<void> }) {
  const audited: { start: RemoteAuditStart; end?: string }[] = [];
  const reloads: string[] = [];
  const locator: AgentLocator = {
    isConnected: (id) => id === DEVICE && agent.connected,
    open: async () => {
      throw new Error('not used here');
    },
    reload: async (id) => {
      reloads.push(id);
      await agent.reload?.();
    },
    disconnect: () => {},
  };
  const service = new RemoteService({
    config: { trustProxy: false, dataDir: '', recordingRetentionDays: 90, consoleDetachGraceSeconds: 60, remoteRecheckMs: 2000 }, // no console is opened here
    logger: createLogger('silent'),
    db: {} as Db, // the port presets are not used here
    auth: {
      authenticate: async () => {
        throw new Error('not used here');
      },
    },
    access: new AccessService({
      scopeOf: async (id) => (id === DEVICE ? { deviceId: DEVICE, nodeIds: [DEVICE, 'root'], tags: ['lab'] } : undefined),
      scopeOfNode: async () => undefined,
    }),
    audit: {
      recordRemoteStart: async (start) => audited.push({ start }),
      recordRemoteEnd: async (id, end) => void (audited[id - 1].end = end.reason),
      recordRemoteJoin: async () => 0, // no console is joined here
      recordRefusedAttempt: async () => {}, // no attempt is refused before its decision here
      recordChange: async () => {}, // no recording is read here
    },
    locator,
  });
  return { service, audited, reloads };
}

describe('RemoteService with fake collaborators', () => {
  it('offers the granted actions and the locator’s connection state', async () => {
    const { service } = build({ connected: true });
    const answer = await service.capabilities(principal([{ permission: 'remote-access:connect', resources: ['tag:lab/console', 'tag:lab/reload'] }]), DEVICE);
    expect(answer).toEqual({ device_id: DEVICE, connected: true, console: true, tunnel: false, copy: false, reload: true });
  });

  it('reload: audited, then asked of the agent through the locator', async () => {
    const { service, audited, reloads } = build({ connected: true });
    await expect(service.reload(principal([{ permission: 'remote-access:connect', resources: ['*/reload'] }]), DEVICE, '127.0.0.1', 'api')).resolves.toEqual({
      ok: true,
      device_id: DEVICE,
    });
    expect(reloads).toEqual([DEVICE]);
    expect(audited).toEqual([{ start: expect.objectContaining({ event: 'remote.reload', allowed: true }), end: 'acknowledged by the agent' }]);
  });

  it('reload refused: 404 for an unknown device, 403 without the action, audited and never sent', async () => {
    const { service, audited, reloads } = build({ connected: true });
    const consoleOnly = principal([{ permission: 'remote-access:connect', resources: ['*/console'] }]);
    await expect(service.reload(consoleOnly, 'b'.repeat(64), '127.0.0.1', 'api')).rejects.toMatchObject({ kind: 'not_found' });
    await expect(service.reload(consoleOnly, DEVICE, '127.0.0.1', 'api')).rejects.toMatchObject({ kind: 'forbidden', code: 'forbidden' });
    expect(reloads).toEqual([]);
    expect(audited.map((a) => a.start.allowed)).toEqual([false, false]);
  });

  it('reload of an offline device or one that fails: 404 device_not_connected, 502 reload_failed', async () => {
    const admin = principal([{ permission: 'remote-access:connect' }]);
    await expect(build({ connected: false }).service.reload(admin, DEVICE, '127.0.0.1', 'api')).rejects.toMatchObject({
      kind: 'not_found',
      code: 'device_not_connected',
    });
    const failing = build({ connected: true, reload: async () => Promise.reject(new Error('no answer')) });
    await expect(failing.service.reload(admin, DEVICE, '127.0.0.1', 'api')).rejects.toMatchObject({ kind: 'upstream_failed', code: 'reload_failed' });
    expect(failing.audited[0].end).toBe('reload failed: no answer');
  });
});
