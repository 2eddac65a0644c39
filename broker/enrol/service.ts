import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { PendingHost, PendingHostEvent } from '../../shared/api-types.js';
import { deviceIdOf, keyFingerprint, parseDevicePublicKey, publicKeyPem } from '../../shared/device-key.js';
import type { AgentLocator } from '../agents/locator.js';
import { RateLimiter, type LimitStore } from '../auth/ratelimit.js';
import type { Db, Store } from '../db/database.js';
import type { BootstrapKeysTable, DevicesTable } from '../db/schema.js';
import {
  deletePendingDevice,
  deviceCountsByKey,
  deviceRecord,
  insertEnrollingDevice,
  isGroupNode,
  listPendingDevices,
  markDeviceApproved,
  touchDevice,
} from '../devices/directory.js';
import { UNASSIGNED_NODE } from '../devices/scope.js';
import type { DevicesService } from '../devices/service.js';
import { conflict, DomainError, invalid, notFound } from '../errors.js';
import { EnrolStore } from './store.js';

/** Failed enrolments (unknown bootstrap key) allowed per address and window; successes do not count. */
export const ENROL_FAILURES_PER_WINDOW = 20;
export const ENROL_WINDOW_MS = 10 * 60_000;

/** A pending host appeared (an agent enrolled with a manual key), was approved, or was rejected: declared once for the broker and the console. */
export type { PendingHostEvent } from '../../shared/api-types.js';
export type PendingHostChange = PendingHostEvent['event'];

export interface BootstrapKeyRecord {
  key: string;
  key_id: string;
  group_id: string;
  auto_accept: boolean;
  created_at: string;
  /** What people call the key; '' when none was given. */
  label: string;
  /** ISO 8601; from then on the key enrols nothing. null: it never expires. */
  expires_at: string | null;
  /** Whether the key has expired (by the broker's clock). */
  expired: boolean;
  /** Devices enrolled with the key (pending and approved); given by listKeys. */
  devices?: number;
}

/** A pending host as the API shows it: declared once for the broker and the console. */
export type { PendingHost } from '../../shared/api-types.js';

export type AgentStanding =
  { kind: 'unknown' } | { kind: 'revoked'; reason: string } | { kind: 'pending' | 'approved'; publicKeyPem: string; hostname: string };

function hashKey(key: string): string {
  return crypto.createHash('sha256').update(key, 'utf8').digest('hex');
}

function isExpired(row: Pick<BootstrapKeysTable, 'expires_at'>, now = Date.now()): boolean {
  return row.expires_at !== null && Date.parse(row.expires_at) <= now;
}

function keyRecord(row: BootstrapKeysTable): BootstrapKeyRecord {
  return {
    key: row.key_secret,
    key_id: row.key_id,
    group_id: row.group_id,
    auto_accept: row.auto_accept === 1,
    created_at: row.created_at,
    label: row.label,
    expires_at: row.expires_at,
    expired: isExpired(row),
  };
}

/** An expiry as stored (ISO 8601, UTC); it must lie ahead: an expired key is deleted, not made. */
function futureExpiry(expiresAt: string): string {
  const at = Date.parse(expiresAt);
  if (!(at > Date.now())) throw invalid('expires_at: lies in the past; give a time ahead, or null for a key that never expires.', { field: 'expires_at' });
  return new Date(at).toISOString();
}

/** What a key's editable fields may be given as. */
export interface BootstrapKeyInput {
  group_id?: string;
  auto_accept?: boolean;
  label?: string;
  /** ISO 8601 ahead of now; null: never expires */
  expires_at?: string | null;
}

function fingerprintOf(pem: string): string {
  try {
    return keyFingerprint(parseDevicePublicKey(pem));
  } catch {
    return '';
  }
}

/**
 * Enrolment: bootstrap keys, agents registering with them, and the approval of pending hosts.
 * A device that is removed or rejected has its key revoked: it can neither reconnect nor enrol
 * again with that key.
 */
export class EnrolService {
  private readonly store: EnrolStore;
  /** Unknown bootstrap keys per address, counted in the database (shared by every broker on it). */
  private readonly limiter: RateLimiter;
  /** Pending hosts appearing, approved and rejected through this broker, once committed (the console's live list: broker/events). */
  readonly pendingChanges = new EventEmitter<{ change: [PendingHostEvent] }>();

  constructor(
    db: Db,
    /** places approved devices in the tree and removes them */
    private readonly devices: Pick<DevicesService, 'placeDevice' | 'removeDevice'>,
    /** cuts off the agent of a rejected or removed device */
    private readonly agents: Pick<AgentLocator, 'disconnect'>,
    limits: LimitStore,
    /** pending-host events go out once the change has committed */
    private readonly transactions: Pick<Store, 'afterCommit'>,
  ) {
    this.store = new EnrolStore(db);
    this.limiter = new RateLimiter(limits, 'enrol-ip', ENROL_FAILURES_PER_WINDOW, ENROL_WINDOW_MS);
  }

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  private announce(event: PendingHostChange, deviceId: string, hostname: string): void {
    const change: PendingHostEvent = { event, device_id: deviceId, hostname, at: new Date().toISOString() };
    this.transactions.afterCommit(() => this.pendingChanges.emit('change', change));
  }

  // ---- bootstrap keys ------------------------------------------------------------------------

  private async requireGroup(groupId: string): Promise<void> {
    if (!(await isGroupNode(this.store.db, groupId))) {
      throw invalid(`There is no group "${groupId}"; give the node id of an existing group (GET /grouptree).`, { field: 'group_id' }, 'unknown_group');
    }
  }

  /** Finds a key by the key itself or by its key_id. */
  private async keyRow(ref: string): Promise<BootstrapKeysTable> {
    const row = await this.store.findKey(hashKey(ref), ref);
    if (!row) throw notFound('Bootstrap key');
    return row;
  }

  async createKey(input: BootstrapKeyInput, createdBy: string | null): Promise<BootstrapKeyRecord> {
    const groupId = input.group_id ?? UNASSIGNED_NODE;
    const expiresAt = input.expires_at ? futureExpiry(input.expires_at) : null;
    await this.requireGroup(groupId);
    // 192 random bits; the hash finds it, the id names it in lists and logs.
    const key = crypto.randomBytes(24).toString('base64url');
    const keyHash = hashKey(key);
    const row: BootstrapKeysTable = {
      key_hash: keyHash,
      key_id: keyHash.slice(0, 16),
      key_secret: key,
      group_id: groupId,
      auto_accept: input.auto_accept ? 1 : 0,
      created_at: new Date().toISOString(),
      created_by: createdBy,
      label: input.label ?? '',
      expires_at: expiresAt,
    };
    await this.store.insertKey(row);
    return keyRecord(row);
  }

  async listKeys(query: { offset: number; items_per_page: number }): Promise<{ items: BootstrapKeyRecord[]; total: number }> {
    const { rows, total } = await this.store.listKeys(query.offset, query.items_per_page);
    const counts = await deviceCountsByKey(
      this.store.db,
      rows.map((r) => r.key_id),
    );
    return { items: rows.map((r) => ({ ...keyRecord(r), devices: counts.get(r.key_id) ?? 0 })), total };
  }

  async getKey(ref: string): Promise<BootstrapKeyRecord> {
    return keyRecord(await this.keyRow(ref));
  }

  async updateKey(ref: string, patch: BootstrapKeyInput): Promise<BootstrapKeyRecord> {
    const row = await this.keyRow(ref);
    const expiresAt = patch.expires_at ? futureExpiry(patch.expires_at) : patch.expires_at;
    if (patch.group_id !== undefined) await this.requireGroup(patch.group_id);
    await this.store.updateKey(row.key_hash, {
      ...(patch.group_id !== undefined ? { group_id: patch.group_id } : {}),
      ...(patch.auto_accept !== undefined ? { auto_accept: patch.auto_accept ? 1 : 0 } : {}),
      ...(patch.label !== undefined ? { label: patch.label } : {}),
      ...(expiresAt !== undefined ? { expires_at: expiresAt } : {}),
    });
    return this.getKey(row.key_id);
  }

  /** Deleting a key stops new enrolments with it; devices enrolled with it stay. */
  async deleteKey(ref: string): Promise<void> {
    const row = await this.keyRow(ref);
    await this.store.deleteKey(row.key_hash);
  }

  // ---- enrolment (the agent) -----------------------------------------------------------------

  /**
   * Registers an agent's public key with a bootstrap key. Idempotent for the same key: a device
   * that enrolled before gets its current state. An auto-accept key approves at once, on the
   * enrolment that creates the device only: a device pending under a manual key stays pending when
   * that key is later switched to auto-accept, or another key is presented.
   */
  async enrol(
    input: { bootstrap_key: string; public_key: string; hostname: string },
    ip: string,
  ): Promise<{ device_id: string; state: 'pending' | 'approved' }> {
    const limitKey = `enrol:${ip}`;
    await this.limiter.hit(limitKey);
    const keyRow = await this.store.keyByHash(hashKey(input.bootstrap_key)); // by the secret only, never by its public id
    if (!keyRow) {
      throw new DomainError(
        'forbidden',
        'unknown_bootstrap_key',
        'The bootstrap key is not known to this broker (wrong key, or it was deleted). Create one with POST /api/v2/bootstrapkey.',
      );
    }
    await this.limiter.release(limitKey);
    if (isExpired(keyRow)) {
      // A real key (no guessing to slow down), but past its time: nothing enrols with it, not even a device that did before.
      throw new DomainError(
        'forbidden',
        'bootstrap_key_expired',
        `The bootstrap key expired at ${keyRow.expires_at}. Ask an operator for a new key, or to extend this one (PUT /api/v2/bootstrapkey/{key} with expires_at).`,
        { expires_at: keyRow.expires_at },
      );
    }
    let publicKey;
    try {
      publicKey = parseDevicePublicKey(input.public_key);
    } catch (err) {
      throw invalid(`public_key: ${(err as Error).message}.`, { field: 'public_key' });
    }
    const deviceId = deviceIdOf(publicKey);
    const revoked = await this.store.revoked(deviceId);
    if (revoked) {
      throw new DomainError(
        'forbidden',
        'device_revoked',
        `This device key was ${revoked.reason} by an operator and cannot enrol again; the agent must make a new key pair to enrol as a new device.`,
        { device_id: deviceId, reason: revoked.reason },
      );
    }
    const now = new Date().toISOString();
    const created = await insertEnrollingDevice(this.store.db, {
      device_id: deviceId,
      public_key: publicKeyPem(publicKey),
      state: 'pending',
      hostname: input.hostname,
      bootstrap_key: keyRow.key_id,
      attributes: JSON.stringify({ device_name: input.hostname }),
      created_at: now,
      approved_at: null,
      last_seen: now,
      last_ip: ip,
      agent_version: null,
    });
    const device = (await deviceRecord(this.store.db, deviceId)) as DevicesTable;
    if (device.state === 'pending') {
      await touchDevice(this.store.db, deviceId, { hostname: input.hostname, last_ip: ip, last_seen: now });
      // Auto-accept approves on the enrolment that creates the device only. A device already waiting
      // for an operator stays pending: presenting another (auto-accept) key must not approve it, nor
      // must switching its own manual key to auto-accept (the hosts that waited were never accepted).
      if (created && keyRow.auto_accept === 1) {
        await this.approve(deviceId);
        return { device_id: deviceId, state: 'approved' };
      }
      if (created) this.announce('pending.added', deviceId, input.hostname);
      return { device_id: deviceId, state: 'pending' };
    }
    return { device_id: deviceId, state: 'approved' };
  }

  /** What the agent channel needs to know of a device id at connection time. */
  async standing(deviceId: string): Promise<AgentStanding> {
    const device = await deviceRecord(this.store.db, deviceId);
    if (device && (device.state === 'pending' || device.state === 'approved')) {
      return { kind: device.state, publicKeyPem: device.public_key, hostname: device.hostname };
    }
    const revoked = await this.store.revoked(deviceId);
    if (revoked) return { kind: 'revoked', reason: revoked.reason };
    return { kind: 'unknown' };
  }

  // ---- pending hosts -------------------------------------------------------------------------

  async pendingHosts(query: { offset: number; items_per_page: number }): Promise<{ items: PendingHost[]; total: number }> {
    const { rows, total } = await listPendingDevices(this.store.db, query.offset, query.items_per_page);
    const groups = new Map<string, string>();
    const items: PendingHost[] = [];
    for (const row of rows) {
      let groupId = UNASSIGNED_NODE;
      if (row.bootstrap_key) {
        if (!groups.has(row.bootstrap_key)) groups.set(row.bootstrap_key, (await this.store.keyById(row.bootstrap_key))?.group_id ?? UNASSIGNED_NODE);
        groupId = groups.get(row.bootstrap_key) as string;
      }
      items.push({
        node_id: row.device_id,
        hostname: row.hostname,
        created_at: row.created_at,
        last_ip: row.last_ip,
        last_seen: row.last_seen,
        public_key_fingerprint: fingerprintOf(row.public_key),
        group_id: groupId,
        bootstrap_key_id: row.bootstrap_key,
      });
    }
    return { items, total };
  }

  private async pendingDevice(nodeId: string): Promise<DevicesTable> {
    const device = await deviceRecord(this.store.db, nodeId);
    if (!device) throw notFound(`Pending host ${nodeId}`);
    if (device.state !== 'pending')
      throw conflict('not_pending', `Device ${nodeId} is approved already; remove it with DELETE /removeapprovedhost/{node_id}.`, { node_id: nodeId });
    return device;
  }

  /** Approves a pending host: it goes into its bootstrap key's group (unassigned when that is gone). */
  async approve(nodeId: string): Promise<{ node_id: string; hostname: string; state: 'approved'; group_id: string; approved_at: string }> {
    const device = await this.pendingDevice(nodeId);
    const key = device.bootstrap_key ? await this.store.keyById(device.bootstrap_key) : undefined;
    const wanted = key?.group_id ?? UNASSIGNED_NODE;
    const at = new Date().toISOString();
    const groupId = await this.store.transaction(async (trx: Db) => {
      if (!(await markDeviceApproved(trx, nodeId, at))) {
        throw conflict('not_pending', `Device ${nodeId} is no longer pending (approved or rejected meanwhile).`, { node_id: nodeId });
      }
      return this.devices.placeDevice(nodeId, wanted, device.hostname || nodeId.slice(0, 12), trx);
    });
    this.announce('pending.approved', nodeId, device.hostname);
    return { node_id: nodeId, hostname: device.hostname, state: 'approved', group_id: groupId, approved_at: at };
  }

  /** Rejects a pending host: its record goes and its key is refused from now on. */
  async reject(nodeId: string): Promise<void> {
    const device = await this.pendingDevice(nodeId);
    await this.store.transaction(async (trx: Db) => {
      if (!(await deletePendingDevice(trx, nodeId))) {
        throw conflict('not_pending', `Device ${nodeId} is no longer pending (approved or rejected meanwhile).`, { node_id: nodeId });
      }
      await this.store.revoke(trx, { device_id: nodeId, reason: 'rejected', hostname: device.hostname, revoked_at: new Date().toISOString() });
    });
    this.announce('pending.removed', nodeId, device.hostname);
    this.agents.disconnect(nodeId, 'device rejected');
  }

  /** Removes an approved device: node, record and inventory go, its key is revoked, its agent is cut off. */
  async removeApproved(nodeId: string): Promise<void> {
    const device = await deviceRecord(this.store.db, nodeId);
    if (!device) throw notFound(`Device ${nodeId}`);
    if (device.state !== 'approved') {
      throw conflict('not_approved', `Device ${nodeId} is pending; reject it with DELETE /pendinghost/{node_id}.`, { node_id: nodeId });
    }
    await this.store.transaction(async (trx: Db) => {
      await this.devices.removeDevice(nodeId, trx);
      await this.store.revoke(trx, { device_id: nodeId, reason: 'removed', hostname: device.hostname, revoked_at: new Date().toISOString() });
    });
    this.agents.disconnect(nodeId, 'device removed');
  }
}
