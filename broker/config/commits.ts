/**
 * Commits: a user's staged changes (or the changes a commit carries) applied at once, in one
 * transaction with the commit's audit entry, and commits read back with their changes (GET
 * /commit/{sha}, GET /commitlist), each change shown only to a caller whose configuration:read
 * reaches its entity.
 */
import type { Principal } from '../access/principal.js';
import type { AuditService } from '../audit/service.js';
import type { Store } from '../db/database.js';
import { DomainError, invalid, notFound } from '../errors.js';
import { userNames } from '../users/directory.js';
import type { BundleData } from './bundles.js';
import { unixSeconds, type ChangeRequest } from './deps.js';
import type { EntityAccess } from './entities.js';
import type { EntityType } from './render.js';
import type { Staging } from './staging.js';
import type { ChangeRow, ConfigStore } from './store.js';

/** Most configuration (bytes of JSON) one page of GET /commitlist answers as its commits' changes. */
const MAX_LISTED_CHANGE_BYTES = 32 * 1024 * 1024;

export class Commits {
  constructor(
    private readonly store: Store,
    private readonly q: ConfigStore,
    private readonly audit: AuditService,
    private readonly entities: EntityAccess,
    private readonly staging: Staging,
    /** Runs once a commit is in: devices whose configuration changed get it. */
    private readonly committed: () => void,
  ) {}

  /**
   * Commits, in one transaction, the changes the commit carries (`changes`: those only, the caller's
   * staged changes stay staged) or else every change the caller has staged: each entity's own bundle
   * is replaced (or removed by reset_to_group), the changes are marked committed, and the commit is an
   * entry of the audit trail whose sha is the commit's. Devices whose configuration changed get it
   * pushed once the transaction is in.
   */
  async commit(principal: Principal, body: { message: string; changes?: ChangeRequest[] }, ip: string): Promise<object> {
    const result = await this.store.transaction(async () => {
      const carried: ChangeRow[] = [];
      for (const [i, change] of (body.changes ?? []).entries()) carried.push(await this.staging.stage(principal, change, `changes[${i}]`, true));
      // An empty `changes` is what qbee's clients leave out (omitempty): the staged changes are committed.
      const staged = carried.length > 0 ? carried : await this.q.staged(principal.user.id);
      if (staged.length === 0) throw invalid('Nothing to commit: stage changes first (POST /change), or send them in `changes`.', {}, 'nothing_to_commit');
      // Roles may have changed since staging: every entity, and the files each change names, are checked again.
      for (const c of staged) {
        try {
          await this.entities.requireEntity(principal, 'configuration:manage', { type: c.entity_type as EntityType, id: c.entity_id });
          await this.entities.requireFiles(principal, c.bundle, JSON.parse(c.content) as BundleData);
        } catch (err) {
          if (!(err instanceof DomainError)) throw err;
          throw err.rephrased(
            `Staged change ${c.sha} (${c.entity_type} ${c.entity_id}, ${c.bundle}): ${err.message} Discard it (DELETE /change/${c.sha}) to commit the others.`,
            {
              ...err.details,
              change: c.sha,
            },
          );
        }
      }
      const audit = await this.audit.recordCommit({ user: principal.user, ip, message: body.message, changes: staged.map((c) => c.sha) });
      const now = new Date().toISOString();
      await this.q.insertCommit({ sha: audit.sha, audit_id: audit.id, user_id: principal.user.id, message: body.message, created_at: now });
      for (const c of staged) await this.q.applyChange(c, audit.sha, now, (JSON.parse(c.content) as BundleData).reset_to_group === true);
      await this.q.markCommitted(
        staged.map((c) => c.id),
        audit.sha,
        now,
      );
      return { sha: audit.sha, created: now, changes: staged.map((c) => c.sha) };
    });
    this.store.afterCommit(this.committed);
    return {
      sha: result.sha,
      message: body.message,
      type: 'config',
      labels: [],
      changes: result.changes,
      user_id: principal.user.id,
      user: { user_id: principal.user.id, fname: principal.user.fname, lname: principal.user.lname },
      created: unixSeconds(result.created),
      updated: unixSeconds(result.created),
    };
  }

  /** A commit with its changes; changes on entities outside the caller's reach are left out. */
  async getCommit(principal: Principal, sha: string): Promise<object> {
    const commit = await this.q.commitRow(sha);
    if (!commit) throw notFound(`Commit ${sha}`);
    const user = (await userNames(this.store.db, [commit.user_id])).get(commit.user_id);
    const who = { user: { id: commit.user_id, fname: user?.fname ?? '', lname: user?.lname ?? '' } };
    const rows = await this.q.changesOf([sha]);
    const changes: object[] = [];
    for (const r of rows) {
      if (await this.entities.mayRead(principal, { type: r.entity_type as EntityType, id: r.entity_id })) changes.push(this.staging.changeView(r, who));
    }
    return {
      sha: commit.sha,
      message: commit.message,
      type: 'config',
      labels: [],
      changes,
      user_id: commit.user_id,
      user: { user_id: commit.user_id, fname: who.user.fname, lname: who.user.lname },
      created: unixSeconds(commit.created_at),
      updated: unixSeconds(commit.created_at),
    };
  }

  /**
   * The changes of these commits as qbee's Change objects (GET /commitlist lists commits as qbee's
   * CommitExtended), by commit sha; changes on entities outside the caller's configuration:read are
   * left out, as in getCommit.
   */
  async commitChanges(principal: Principal, commitShas: string[]): Promise<Map<string, object[]>> {
    const out = new Map<string, object[]>();
    if (commitShas.length === 0) return out;
    // A page of commits answers their changes whole: bounded, or refused with what to ask instead.
    if ((await this.q.changeBytes(commitShas)) > MAX_LISTED_CHANGE_BYTES)
      throw invalid(
        `The changes of these ${commitShas.length} commits exceed ${MAX_LISTED_CHANGE_BYTES / (1024 * 1024)} MiB: ask for fewer (items_per_page), or one at a time (GET /commit/{sha}).`,
        { field: 'items_per_page' },
        'too_large',
      );
    const rows = await this.q.changesOf(commitShas);
    const users = await userNames(
      this.store.db,
      rows.map((r) => r.user_id),
    );
    const reach = new Map<string, boolean>();
    for (const r of rows) {
      const key = `${r.entity_type}:${r.entity_id}`;
      if (!reach.has(key)) reach.set(key, await this.entities.mayRead(principal, { type: r.entity_type as EntityType, id: r.entity_id }));
      if (!reach.get(key)) continue;
      const u = users.get(r.user_id);
      const view = this.staging.changeView(r, { user: { id: r.user_id, fname: u?.fname ?? '', lname: u?.lname ?? '' } });
      const list = out.get(r.commit_sha as string) ?? [];
      list.push(view);
      out.set(r.commit_sha as string, list);
    }
    return out;
  }
}
