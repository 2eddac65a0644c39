import crypto from 'node:crypto';
import type { PermissionInfo, RolePolicy, RoleRecord } from '../../shared/api-types.js';
import { PERMISSION_NAMES, PERMISSIONS } from '../../shared/permissions.js';
import { compilePolicies, uncoveredGrants, validatePolicies, type Policy, type PolicyProblem } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import { RECORDING_RANK, recordingModeOf, type RecordingMode } from '../access/recording.js';
import type { Principal } from '../access/principal.js';
import type { Store } from '../db/database.js';
import { conflict, DomainError, invalid, notFound } from '../errors.js';
import type { RoleUser, rolesOfUsers, usersOfRoles } from '../users/directory.js';
import { writeIdentity, type Executor } from './identity.js';
import { deleteRole, findRole, insertRole, listRoles, policiesOfRoles, roleNameTaken, updateRole, type RoleRow } from './store.js';

/** A role and a permission as the API shows them: declared once for the broker and the console. */
export type { PermissionInfo, RolePolicy, RoleRecord } from '../../shared/api-types.js';

/** Who holds which roles: the users domain answers (users/directory.ts), handed in at composition. */
export interface RoleHolders {
  usersOfRoles: typeof usersOfRoles;
  rolesOfUsers: typeof rolesOfUsers;
}

export interface RoleInput {
  name: string;
  description?: string;
  policies: Policy[];
  /** Left out: `default` on create, unchanged on replace. */
  recording?: RecordingMode;
}

/** Omitted or empty resources mean every device ("*"); repeated resources are listed once. */
export function normalizePolicies(policies: Policy[]): RolePolicy[] {
  return policies.map((p) => ({
    permission: p.permission,
    resources: p.resources === undefined || p.resources.length === 0 ? ['*'] : [...new Set(p.resources)],
  }));
}

/** Shows a client-supplied string inside a message: control and invisible characters escaped, length capped. */
function shown(value: string): string {
  const capped = value.length > 80 ? `${value.slice(0, 80)}…` : value;
  return capped.replace(/[\p{Cc}\p{Cf}]/gu, (c) => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}`);
}

/** One sentence naming the policy (by position and permission) and the resource, then what is wrong. */
export function describeProblem(p: PolicyProblem): string {
  // Syntax errors already start with `resource "<the resource>": `.
  const resource = p.resource !== undefined && p.code !== 'resource_syntax' ? `, resource "${shown(p.resource)}"` : '';
  return `policy ${p.policy + 1} (${shown(String(p.permission))})${resource}: ${p.message}`;
}

function seconds(iso: string | null): number {
  return iso ? Math.floor(Date.parse(iso) / 1000) : 0;
}

/** A new updated_at strictly after the previous one: sign-in caches a role's policies by it. */
function nextUpdatedAt(previous: string): string {
  const now = new Date();
  const prev = Date.parse(previous);
  return (Number.isFinite(prev) && now.getTime() <= prev ? new Date(prev + 1) : now).toISOString();
}

const builtinRole = () => conflict('builtin_role', 'The built-in Administrator role cannot be changed or deleted; create a role of your own instead.');

/**
 * Roles: named sets of policies (a permission, optionally narrowed to devices by resource strings).
 * A change applies to its holders on their next call: sign-in reads roles per request and caches
 * parsed policies by updated_at, so every change moves updated_at forward.
 */
export class RolesService {
  constructor(
    private readonly store: Pick<Store, 'db' | 'dialect'>,
    private readonly access: Pick<AccessService, 'requireGrantable' | 'requireOutranks'>,
    private readonly holders: RoleHolders,
  ) {}

  /** The built-in Administrator role holds every permission, including ones added since it was made. */
  async init(): Promise<void> {
    const full = JSON.stringify(PERMISSION_NAMES.map((permission) => ({ permission, resources: ['*'] })));
    const rows = await this.db.selectFrom('roles').select(['id', 'policies', 'updated_at']).where('builtin', '=', 1).execute();
    for (const row of rows) {
      if (row.policies !== full) await updateRole(this.db, row.id, { policies: full, updated_at: nextUpdatedAt(row.updated_at) });
    }
  }

  async close(): Promise<void> {}

  private get db(): Executor {
    return this.store.db;
  }

  private toRecord(row: RoleRow, usedBy: RoleUser[]): RoleRecord {
    return {
      id: row.id,
      name: row.name,
      description: row.description,
      policies: normalizePolicies(JSON.parse(row.policies) as Policy[]),
      recording: recordingModeOf(row.recording),
      builtin: row.builtin === 1,
      created_at: seconds(row.created_at),
      created_by: row.created_by,
      updated_at: seconds(row.updated_at),
      updated_by: row.updated_by,
      used_by: usedBy,
    };
  }

  permissions(): { items: PermissionInfo[]; total: number } {
    const items = PERMISSION_NAMES.map((permission) => ({
      permission,
      description: PERMISSIONS[permission].description,
      accepts_resources: PERMISSIONS[permission].accepts_resources,
    }));
    return { items, total: items.length };
  }

  async get(roleId: string): Promise<RoleRecord> {
    const row = await findRole(this.db, roleId);
    if (!row) throw notFound(`Role ${roleId}`);
    const users = await this.holders.usersOfRoles(this.db, [row.id]);
    return this.toRecord(row, users.get(row.id) ?? []);
  }

  async list(q: { offset: number; items_per_page: number; search?: string }): Promise<{ items: RoleRecord[]; total: number }> {
    const { total, rows } = await listRoles(this.db, { offset: q.offset, limit: q.items_per_page, search: q.search?.trim() || undefined });
    const users = await this.holders.usersOfRoles(
      this.db,
      rows.map((r) => r.id),
    );
    return { items: rows.map((r) => this.toRecord(r, users.get(r.id) ?? [])), total };
  }

  async create(actor: Principal, input: RoleInput): Promise<RoleRecord> {
    const policies = this.validated(input.policies);
    this.access.requireGrantable(actor, policies);
    const id = crypto.randomUUID();
    const now = new Date().toISOString();
    await this.write(async (trx) => {
      if (await roleNameTaken(trx, input.name)) throw duplicateName(input.name);
      await insertRole(trx, {
        id,
        name: input.name,
        description: input.description ?? '',
        policies: JSON.stringify(policies),
        recording: input.recording ?? 'default',
        builtin: 0,
        created_at: now,
        created_by: actor.user.id,
        updated_at: now,
        updated_by: actor.user.id,
      });
    });
    return this.get(id);
  }

  /** Replaces name, description and policies; holders get the new permissions on their next call. */
  async replace(actor: Principal, roleId: string, input: RoleInput): Promise<RoleRecord> {
    const policies = this.validated(input.policies);
    this.access.requireGrantable(actor, policies);
    await this.write(async (trx) => {
      const role = await findRole(trx, roleId);
      if (!role) throw notFound(`Role ${roleId}`);
      if (role.builtin) throw builtinRole();
      if (await roleNameTaken(trx, input.name, roleId)) throw duplicateName(input.name);
      await this.requireOutranksHoldersOnRemoval(trx, actor, role, policies, input.recording);
      await updateRole(trx, roleId, {
        name: input.name,
        description: input.description ?? '',
        policies: JSON.stringify(policies),
        ...(input.recording ? { recording: input.recording } : {}),
        updated_at: nextUpdatedAt(role.updated_at),
        updated_by: actor.user.id,
      });
    });
    return this.get(roleId);
  }

  /**
   * Taking something away from a role — a permission, a resource, or its console recording turned
   * off or down (required → default → off) — acts on everyone who holds it: the actor must outrank
   * every holder (hold everything they hold, see `requireOutranks`), as for taking a role away from
   * a user through users:manage. Otherwise 403 `privilege_escalation`, and nothing changes.
   */
  private async requireOutranksHoldersOnRemoval(
    trx: Executor,
    actor: Principal,
    role: RoleRow,
    policies: RolePolicy[],
    recording?: RecordingMode,
  ): Promise<void> {
    const removed = uncoveredGrants(compilePolicies(policies), JSON.parse(role.policies) as Policy[]);
    const before = recordingModeOf(role.recording);
    const lowered = recording !== undefined && RECORDING_RANK[recording] < RECORDING_RANK[before];
    if (removed.length === 0 && !lowered) return;
    const holders = (await this.holders.usersOfRoles(trx, [role.id])).get(role.id) ?? [];
    if (holders.length === 0) return;
    if (holders.some((h) => h.user_id === actor.user.id)) await this.requireOwnRecordingKept(trx, actor, role, removed, lowered ? recording : undefined);
    const held = await this.holders.rolesOfUsers(
      trx,
      holders.map((h) => h.user_id),
    );
    const roleIds = [...new Set([...held.values()].flat())];
    const taken = removed.slice(0, 3).map((m) => `${m.permission} on ${m.resource}`);
    const parts: string[] = [];
    if (removed.length > 0) parts.push(`take ${taken.join(', ')}${removed.length > 3 ? ', …' : ''} away`);
    if (lowered) parts.push(`turn its console recording from ${before} to ${recording}`);
    const what = parts.join(' and ');
    this.access.requireOutranks(
      actor,
      await policiesOfRoles(trx, roleIds),
      `You cannot change the role "${shown(role.name)}", held by ${holders.length} user(s), to ${what}`,
    );
  }

  /**
   * Outranking oneself is trivial, so a role manager who holds the role changed could lower the
   * recording of their own consoles: turn the role's recording down, or take a remote-access:connect
   * grant out of it while another role of theirs grants remote-access:connect with a lower recording
   * (the console then falls to that role's mode). Both are refused: another role manager must do it.
   * (Adding grants never lowers a mode: the strictest role granting a console decides.)
   */
  private async requireOwnRecordingKept(
    trx: Executor,
    actor: Principal,
    role: RoleRow,
    removed: { permission: string; resource: string }[],
    loweredTo: RecordingMode | undefined,
  ): Promise<void> {
    const before = recordingModeOf(role.recording);
    const refuse = (what: string) =>
      new DomainError(
        'forbidden',
        'privilege_escalation',
        `You hold the role "${shown(role.name)}": ${what} would lower the recording of your own consoles; ask another user who may manage roles.`,
      );
    if (loweredTo !== undefined) throw refuse(`turning its console recording from ${before} to ${loweredTo}`);
    if (!removed.some((m) => m.permission === 'remote-access:connect')) return;
    const mine = ((await this.holders.rolesOfUsers(trx, [actor.user.id])).get(actor.user.id) ?? []).filter((id) => id !== role.id);
    if (mine.length === 0) return;
    const others = await trx.selectFrom('roles').select(['recording', 'policies']).where('id', 'in', mine).execute();
    const lower = others.some(
      (r) =>
        RECORDING_RANK[recordingModeOf(r.recording)] < RECORDING_RANK[before] &&
        (JSON.parse(r.policies) as Policy[]).some((p) => p.permission === 'remote-access:connect'),
    );
    if (lower) throw refuse('taking remote-access:connect out of it while another role of yours grants it with a lower recording');
  }

  /** Deletes a role no user holds; otherwise 409 role_in_use with the users to reassign first. */
  async remove(roleId: string): Promise<void> {
    await this.write(async (trx) => {
      const role = await findRole(trx, roleId);
      if (!role) throw notFound(`Role ${roleId}`);
      if (role.builtin) throw builtinRole();
      const usedBy = (await this.holders.usersOfRoles(trx, [roleId])).get(roleId) ?? [];
      if (usedBy.length > 0) {
        throw conflict('role_in_use', `The role "${role.name}" is assigned to ${usedBy.length} user(s); give them another role first.`, { used_by: usedBy });
      }
      await deleteRole(trx, roleId);
    });
  }

  /** Normalised policies, or 400 invalid_policy naming each policy and resource at fault. */
  private validated(policies: Policy[]): RolePolicy[] {
    const normalized = normalizePolicies(policies);
    const problems = validatePolicies(normalized);
    if (problems.length > 0) {
      throw invalid(`Invalid policies: ${problems.slice(0, 10).map(describeProblem).join('; ')}.`, { field: 'policies', problems }, 'invalid_policy');
    }
    return normalized;
  }

  /** One transaction under the identity lock; a unique-name race surfaces as 409. */
  private write(work: (trx: Executor) => Promise<void>): Promise<void> {
    return writeIdentity(this.db, this.store.dialect, work, () => conflict('duplicate_role_name', 'A role with this name exists already.', { field: 'name' }));
  }
}

function duplicateName(name: string) {
  return conflict('duplicate_role_name', `A role named "${shown(name)}" exists already.`, { field: 'name' });
}
