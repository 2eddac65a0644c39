/**
 * Staging: each user's uncommitted changes (POST/GET/DELETE /change, GET /changelist). A change is
 * checked (its bundle, the caller's reach of its entity and of the files it names) and kept as the
 * caller's until a commit takes it; secrets it sends as references are restored from where they are
 * stored, and answered masked again.
 */
import crypto from 'node:crypto';
import type { Principal } from '../access/principal.js';
import { conflict, DomainError, invalid, notFound } from '../errors.js';
import { maskSecrets, restoreSecrets, validateBundle, type BundleData } from './bundles.js';
import { MAX_STAGED, unixSeconds, type ChangeListQuery, type ChangeRequest, type SecretKey } from './deps.js';
import type { EntityAccess } from './entities.js';
import type { ChangeRow, ConfigStore } from './store.js';

const SEARCH_FIELDS = new Set(['user_id', 'group_id', 'status', 'form_type', 'type']);
const DATE_TIME = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})$/;

/** Who made a change, as answered with it. */
export type ChangeAuthor = Principal | { user: { id: string; fname: string; lname: string } };

export class Staging {
  constructor(
    private readonly q: ConfigStore,
    private readonly entities: EntityAccess,
    private readonly secrets: SecretKey,
  ) {}

  /** Stages one change (replacing the caller's staged change of the same entity and bundle). */
  async createChange(principal: Principal, req: ChangeRequest): Promise<object> {
    const row = await this.stage(principal, req);
    return this.changeView(row, principal);
  }

  /**
   * Checks a change and writes it as the caller's (status new). Staged (POST /change), it replaces the
   * caller's staged change of the same entity and bundle; `inline` (carried by a commit), it is a row
   * of its own that the commit takes, and the caller's staged changes stay as they are.
   */
  async stage(principal: Principal, req: ChangeRequest, field = '', inline = false): Promise<ChangeRow> {
    const entity = this.entities.entityOf(req);
    let data: BundleData;
    try {
      data = validateBundle(req.formtype, req.config);
    } catch (err) {
      if (field && err instanceof DomainError) throw err.rephrased(`${field}: ${err.message}`);
      throw err;
    }
    await this.entities.requireEntity(principal, 'configuration:manage', entity);
    await this.entities.requireFiles(principal, req.formtype, data);
    // qbee's clients (qbee-cli `config save`, the Terraform provider) say `extend` in the bundle's
    // metadata and send the request's `extend` false: the bundle's own value decides, the request's
    // applies when the bundle leaves it out. The bundle keeps the value taken, so it reads back alike.
    const extend = typeof data.extend === 'boolean' ? data.extend : req.extend === true;
    data.extend = extend;
    const previous = await this.q.stagedOf(principal.user.id, entity, req.formtype);
    const committed = await this.q.entities([entity]);
    const home = `${entity.type}:${entity.id}`;
    const known = [
      ...committed
        .filter((r) => r.bundle === req.formtype)
        .map((r) => ({ data: JSON.parse(r.data) as BundleData, home: { entity: home, version: r.commit_sha } })),
      ...previous.map((p) => ({ data: JSON.parse(p.content) as BundleData, home: { entity: home, version: p.id } })),
    ];
    data = restoreSecrets(req.formtype, data, known, this.secrets.key);
    if (!inline) await this.q.deleteChanges(previous.map((p) => p.id));
    const count = await this.q.countStaged(principal.user.id);
    if (!inline && count >= MAX_STAGED) throw conflict('too_many_changes', `You have ${MAX_STAGED} staged changes; commit or discard some first.`);
    const now = new Date().toISOString();
    const id = crypto.randomUUID();
    const content = JSON.stringify(data);
    const sha = crypto
      .createHash('sha256')
      .update(`${id}\n${principal.user.id}\n${entity.type}:${entity.id}\n${req.formtype}\n${extend}\n${content}\n${now}`)
      .digest('hex');
    const row: ChangeRow = {
      id,
      sha,
      user_id: principal.user.id,
      status: 'new',
      entity_type: entity.type,
      entity_id: entity.id,
      bundle: req.formtype,
      extend: extend ? 1 : 0,
      content,
      commit_sha: null,
      created_at: now,
      updated_at: now,
      seq: await this.q.nextSeq(),
    };
    await this.q.insertChange(row);
    return row;
  }

  /** A change of the caller's (others' changes are not found). */
  private async ownChange(principal: Principal, sha: string): Promise<ChangeRow> {
    const row = await this.q.change(sha);
    if (!row || row.user_id !== principal.user.id) throw notFound(`Change ${sha}`);
    return row;
  }

  async getChange(principal: Principal, sha: string): Promise<object> {
    return this.changeView(await this.ownChange(principal, sha), principal);
  }

  async deleteChange(principal: Principal, sha: string): Promise<void> {
    const row = await this.ownChange(principal, sha);
    if (row.status !== 'new') throw conflict('change_committed', `Change ${sha} is committed; change the configuration again instead.`);
    await this.q.deleteChanges([row.id]);
  }

  async deleteChanges(principal: Principal): Promise<void> {
    await this.q.deleteStaged(principal.user.id);
  }

  async listChanges(principal: Principal, query: ChangeListQuery): Promise<object[]> {
    let search: Record<string, unknown> = {};
    if (query.search !== undefined && query.search !== '') {
      try {
        search = JSON.parse(query.search) as Record<string, unknown>;
      } catch {
        throw invalid('search must be JSON: {"status":"new","form_type":"settings",...}.', { field: 'search' });
      }
      if (!search || typeof search !== 'object' || Array.isArray(search)) throw invalid('search must be a JSON object.', { field: 'search' });
      for (const [k, v] of Object.entries(search)) {
        if (!SEARCH_FIELDS.has(k))
          throw invalid(`search.${k.slice(0, 64)} is not a search field; fields: ${[...SEARCH_FIELDS].join(', ')}.`, { field: 'search' });
        if (typeof v !== 'string') throw invalid(`search.${k} must be a string.`, { field: 'search' });
      }
    }
    // Other users' changes are invisible: a search for them finds nothing.
    if (search.user_id && search.user_id !== principal.user.id) return [];
    if (search.type && search.type !== 'config') return [];
    const created: { createdFrom?: string; createdBefore?: string } = {};
    for (const [field, key] of [
      ['created_start', 'createdFrom'],
      ['created_end', 'createdBefore'],
    ] as const) {
      const v = query[field];
      if (v === undefined || v === '') continue;
      const m = DATE_TIME.exec(v);
      const iso = m ? new Date(`${m[1]}T${m[2]}Z`) : undefined;
      if (!iso || Number.isNaN(iso.getTime())) throw invalid(`${field} must be "YYYY-MM-DD hh:mm:ss" (UTC).`, { field });
      created[key] = iso.toISOString();
    }
    const rows = await this.q.listChanges({
      userId: principal.user.id,
      // qbee lists uncommitted changes unless asked for another status.
      status: search.status ? String(search.status) : 'new',
      ...(search.form_type ? { bundle: String(search.form_type) } : {}),
      ...(search.group_id ? { nodeId: String(search.group_id) } : {}),
      ...created,
      sort: query.sort === 'id' ? 'id' : 'seq',
      direction: query.sort_direction ?? 'desc',
      offset: query.offset,
      limit: query.limit,
    });
    return rows.map((r) => this.changeView(r, principal));
  }

  /** A change as qbee's Change, its secrets masked as references bound to the change. */
  changeView(row: ChangeRow, author: ChangeAuthor): object {
    const data = maskSecrets(row.bundle, JSON.parse(row.content) as BundleData, this.secrets.key, {
      entity: `${row.entity_type}:${row.entity_id}`,
      version: row.id,
    });
    const u = author.user;
    return {
      id: row.id,
      sha: row.sha,
      status: row.status,
      type: 'config',
      content: {
        ...(row.entity_type === 'node' ? { node_id: row.entity_id } : { tag: row.entity_id }),
        formtype: row.bundle,
        extend: Number(row.extend) === 1,
        config: data,
      },
      created: unixSeconds(row.created_at),
      updated: unixSeconds(row.updated_at),
      user_id: row.user_id,
      user_name: `${u.fname} ${u.lname}`.trim(),
      user: { user_id: u.id, fname: u.fname, lname: u.lname },
      ...(row.commit_sha ? { commit_sha: row.commit_sha } : {}),
    };
  }
}
