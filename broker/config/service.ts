/**
 * Configuration management (qbee's model): changes staged per user, commits that apply all of a
 * user's staged changes at once, the rendered configuration of nodes and tags, and the link to
 * agents — the configuration pushed on commit and on connect, what the agent reports it applied,
 * and the file-store files its configuration names, sent on request.
 */
import crypto from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import type { AgentDefaults, ChannelKind, ChannelParams, CommittedConfig, ControlMessage } from '../../shared/protocol.js';
import { TAG_PATTERN, TAG_RULE } from '../../shared/resources.js';
import type { Channel } from '../../shared/mux.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AuditService } from '../audit/service.js';
import { sql, type Store } from '../db/database.js';
import { readAttributes } from '../devices/attributes.js';
import { nodeChain, ROOT_NODE, scopeOfChain, type ChainRow } from '../devices/scope.js';
import { ApiError, badRequest, conflict, notFound } from '../http/errors.js';
import type { SettingsStore } from '../settings.js';
import {
  bundleFiles,
  credentialValues,
  distributedFiles,
  maskSecrets,
  scrubReports,
  normalizeSource,
  referencedFiles,
  restoreSecrets,
  validateBundle,
  withFileDigests,
  type BundleData,
} from './bundles.js';
import { render, type EntityType, type Level, type OwnBundle, type RenderedConfig } from './render.js';
import { ConfigStore, level, levelsOf, type ChangeRow } from './store.js';
import { isSingleLine } from '../../shared/text.js';
import type { CheckedReports } from '../../shared/reports.js';
import type { AgentMessage } from '../../shared/wire.js';

/** Where agents' configuration reports go (bound to the reports domain at merge). */
export interface ReportSink {
  recordChecked(deviceId: string, reports: CheckedReports): Promise<unknown>;
}

/** What the service needs of the agents: send a device-level message, open a channel. */
export interface ConfigAgentLink {
  /** Sends to an agent connected to this broker; false when it is not connected here. */
  send(deviceId: string, msg: ControlMessage): boolean;
  /** Connected to this broker or, with several brokers, to another one. */
  isConnected(deviceId: string): boolean;
  /**
   * Several brokers: asks the brokers holding these devices' agents (connected, not here) to send
   * them their current configuration, within about a second (broker/cluster, `config` NOTIFY).
   */
  pushElsewhere?(deviceIds: string[]): void;
  open(deviceId: string, kind: ChannelKind, params: ChannelParams): Promise<{ channel: Channel; info: Record<string, unknown> }>;
}

/** The file store, as far as sending a configuration's files goes. */
export interface ConfigFiles {
  metadata(path: string): Promise<{ size?: number; sha256?: string; digest?: string; type?: string }>;
  download(path: string): Promise<{ size: number; stream: NodeJS.ReadableStream & { destroy(): void } }>;
}

export interface ConfigDeps {
  store: Store;
  settings: SettingsStore;
  access: AccessService;
  audit: AuditService;
  files: ConfigFiles;
  agents: ConfigAgentLink;
  reports: ReportSink;
  logger: Logger;
  /** The account's defaults sent with every configuration (the company's agent_interval); none when absent. */
  agentDefaults?: () => Promise<AgentDefaults>;
}

export interface ChangeRequest {
  node_id?: string;
  tag?: string;
  formtype: string;
  extend?: boolean;
  config: unknown;
}

export interface ChangeListQuery {
  search?: string;
  created_start?: string;
  created_end?: string;
  sort?: 'id' | 'created';
  sort_direction?: 'asc' | 'desc';
  limit: number;
  offset: number;
}

interface Entity {
  type: EntityType;
  id: string;
}

/** Most changes one user may have staged at once. */
export const MAX_STAGED = 500;
/** Most changes carried inline by one commit. */
export const MAX_INLINE_CHANGES = 100;
/** Most configuration (bytes of JSON) one page of GET /commitlist answers as its commits' changes. */
const MAX_LISTED_CHANGE_BYTES = 32 * 1024 * 1024;
/** Files sent to agents at once: per device, and in all. */
const MAX_FILES_PER_DEVICE = 4;
const MAX_FILES = 64;
/**
 * File requests waiting for one of the MAX_FILES transfer slots (first come, first served): a commit
 * reaching a thousand agents at once has them fetch their files in turn instead of being refused.
 */
const MAX_FILES_QUEUED = 4096;
/** Largest configuration message sent to an agent (its connection takes 16 MiB messages). */
const MAX_PUSH_BYTES = 8 * 1024 * 1024;
/** A file transfer making no progress this long is cut. */
const FILE_STALL_MS = 60_000;
/** How often changes to the tree and attributes are looked for (see watch). */
export const WATCH_INTERVAL_MS = 15_000;
const ID_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;

const unixSeconds = (iso: string) => Math.floor(Date.parse(iso) / 1000);
const SEARCH_FIELDS = new Set(['user_id', 'group_id', 'status', 'form_type', 'type']);
const DATE_TIME = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})$/;

export class ConfigService {
  private readonly q: ConfigStore;
  private secretKey = Buffer.alloc(0);
  private readonly sending = new Map<string, number>();
  private sendingTotal = 0;
  /** Requests waiting for a transfer slot; each is handed a slot as one frees. */
  private readonly fileQueue: (() => void)[] = [];
  private propagation: Promise<void> = Promise.resolve();
  private propagationQueued = false;
  /** Devices another broker asked to be sent their configuration (pushCurrent), not yet served. */
  private readonly wanted = new Set<string>();
  private wantedQueued = false;
  private watchTimer?: NodeJS.Timeout;

  constructor(private readonly deps: ConfigDeps) {
    this.q = new ConfigStore(deps.store.db);
  }

  async init(): Promise<void> {
    const key = await this.deps.settings.getOrCreate<string>('config.secret_ref_key', () => crypto.randomBytes(32).toString('hex'));
    this.secretKey = Buffer.from(key, 'hex');
  }

  async close(): Promise<void> {
    if (this.watchTimer) clearInterval(this.watchTimer);
    await this.propagation.catch(() => {});
  }

  /**
   * Moves in the tree, tag changes and device attributes (which templates use) change what a device
   * should run without a commit: every `intervalMs`, when something was changed through the API since
   * the last look (the change epoch moved), devices are rendered again and those whose configuration
   * changed get it (propagate compares digests, so nothing else is sent).
   */
  watch(epoch: { value: number }, intervalMs = WATCH_INTERVAL_MS): void {
    let seen = epoch.value;
    this.watchTimer = setInterval(() => {
      if (epoch.value === seen) return;
      seen = epoch.value;
      this.schedulePropagation();
    }, intervalMs);
    this.watchTimer.unref();
  }

  // ---- entities and access -------------------------------------------------------------------

  /** The node's chain (node first, root last); 404 for an unknown node. */
  private async chainOf(nodeId: string): Promise<ChainRow[]> {
    const chain = await nodeChain(this.deps.store.db, nodeId);
    if (chain.length === 0 || chain[chain.length - 1].node_id !== ROOT_NODE) throw notFound(`Node ${nodeId}`);
    return chain;
  }

  private entityOf(req: { node_id?: string; tag?: string }): Entity {
    const hasNode = typeof req.node_id === 'string' && req.node_id !== '';
    const hasTag = typeof req.tag === 'string' && req.tag !== '';
    if (hasNode === hasTag) throw badRequest('Name exactly one of node_id and tag: the entity the change configures.', { field: 'node_id' });
    if (hasTag) {
      if (!TAG_PATTERN.test(req.tag!)) throw badRequest(`tag must be a tag: ${TAG_RULE}.`, { field: 'tag' });
      return { type: 'tag', id: req.tag! };
    }
    return { type: 'node', id: req.node_id! };
  }

  private async requireEntity(principal: Principal, permission: 'configuration:read' | 'configuration:manage', entity: Entity): Promise<void> {
    if (entity.type === 'node') await this.chainOf(entity.id);
    await this.deps.access.requireConfigEntity(principal, permission, entity);
  }

  /**
   * A change naming files of the file store (FILE_FIELDS) sends them to devices, where whoever
   * configures them reads them: it needs files:read, the permission to read those files (it accepts
   * no resources, so it covers every path of the store). 403 `files_not_readable` otherwise. A
   * change that resets the bundle to the inherited one sends nothing.
   */
  private async requireFiles(principal: Principal, bundle: string, data: BundleData): Promise<void> {
    if (data.reset_to_group === true) return;
    const files = bundleFiles(bundle, data);
    if (files.length === 0) return;
    if ((await this.deps.access.decide(principal, 'files:read')).allowed) return;
    const shown = files.slice(0, 3).map((f) => `"${f.slice(0, 200)}"`);
    throw new ApiError(
      403,
      'files_not_readable',
      `Not allowed: ${bundle} names ${shown.join(', ')}${files.length > 3 ? ', …' : ''} of the file store, which devices are sent and you would read through them; that needs files:read.`,
      { permission: 'files:read', files: files.slice(0, 20).map((f) => f.slice(0, 1024)) },
    );
  }

  // ---- changes ----------------------------------------------------------------------------------

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
  private async stage(principal: Principal, req: ChangeRequest, field = '', inline = false): Promise<ChangeRow> {
    const entity = this.entityOf(req);
    let data: BundleData;
    try {
      data = validateBundle(req.formtype, req.config);
    } catch (err) {
      if (field && err instanceof ApiError) throw new ApiError(err.status, err.error, `${field}: ${err.message}`, err.details);
      throw err;
    }
    await this.requireEntity(principal, 'configuration:manage', entity);
    await this.requireFiles(principal, req.formtype, data);
    // qbee's clients (qbee-cli `config save`, the Terraform provider) say `extend` in the bundle's
    // metadata and send the request's `extend` false: the bundle's own value decides, the request's
    // applies when the bundle leaves it out. The bundle keeps the value taken, so it reads back alike.
    const extend = typeof data.extend === 'boolean' ? data.extend : req.extend === true;
    data.extend = extend;
    const db = this.deps.store.db;
    const previous = await db
      .selectFrom('config_changes')
      .selectAll()
      .where('user_id', '=', principal.user.id)
      .where('status', '=', 'new')
      .where('entity_type', '=', entity.type)
      .where('entity_id', '=', entity.id)
      .where('bundle', '=', req.formtype)
      .execute();
    const committed = await this.q.entities([entity]);
    const home = `${entity.type}:${entity.id}`;
    const known = [
      ...committed
        .filter((r) => r.bundle === req.formtype)
        .map((r) => ({ data: JSON.parse(r.data) as BundleData, home: { entity: home, version: r.commit_sha } })),
      ...previous.map((p) => ({ data: JSON.parse(p.content) as BundleData, home: { entity: home, version: p.id } })),
    ];
    data = restoreSecrets(req.formtype, data, known, this.secretKey);
    if (previous.length > 0 && !inline)
      await db
        .deleteFrom('config_changes')
        .where(
          'id',
          'in',
          previous.map((p) => p.id),
        )
        .execute();
    const { count } = await db
      .selectFrom('config_changes')
      .select((eb) => eb.fn.countAll<number>().as('count'))
      .where('user_id', '=', principal.user.id)
      .where('status', '=', 'new')
      .executeTakeFirstOrThrow();
    if (!inline && Number(count) >= MAX_STAGED) throw conflict('too_many_changes', `You have ${MAX_STAGED} staged changes; commit or discard some first.`);
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
    await db.insertInto('config_changes').values(row).execute();
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
    await this.deps.store.db.deleteFrom('config_changes').where('id', '=', row.id).execute();
  }

  async deleteChanges(principal: Principal): Promise<void> {
    await this.deps.store.db.deleteFrom('config_changes').where('user_id', '=', principal.user.id).where('status', '=', 'new').execute();
  }

  async listChanges(principal: Principal, query: ChangeListQuery): Promise<object[]> {
    let search: Record<string, unknown> = {};
    if (query.search !== undefined && query.search !== '') {
      try {
        search = JSON.parse(query.search) as Record<string, unknown>;
      } catch {
        throw badRequest('search must be JSON: {"status":"new","form_type":"settings",...}.', { field: 'search' });
      }
      if (!search || typeof search !== 'object' || Array.isArray(search)) throw badRequest('search must be a JSON object.', { field: 'search' });
      for (const [k, v] of Object.entries(search)) {
        if (!SEARCH_FIELDS.has(k))
          throw badRequest(`search.${k.slice(0, 64)} is not a search field; fields: ${[...SEARCH_FIELDS].join(', ')}.`, { field: 'search' });
        if (typeof v !== 'string') throw badRequest(`search.${k} must be a string.`, { field: 'search' });
      }
    }
    let q = this.deps.store.db.selectFrom('config_changes').selectAll().where('user_id', '=', principal.user.id);
    // Other users' changes are invisible: a search for them finds nothing.
    if (search.user_id && search.user_id !== principal.user.id) return [];
    // qbee lists uncommitted changes unless asked for another status.
    q = q.where('status', '=', search.status ? String(search.status) : 'new');
    if (search.form_type) q = q.where('bundle', '=', String(search.form_type));
    if (search.group_id) q = q.where('entity_type', '=', 'node').where('entity_id', '=', String(search.group_id));
    if (search.type && search.type !== 'config') return [];
    for (const [field, op] of [
      ['created_start', '>='],
      ['created_end', '<'],
    ] as const) {
      const v = query[field];
      if (v === undefined || v === '') continue;
      const m = DATE_TIME.exec(v);
      const iso = m ? new Date(`${m[1]}T${m[2]}Z`) : undefined;
      if (!iso || Number.isNaN(iso.getTime())) throw badRequest(`${field} must be "YYYY-MM-DD hh:mm:ss" (UTC).`, { field });
      q = q.where('created_at', op, iso.toISOString());
    }
    const direction = query.sort_direction ?? 'desc';
    q = q.orderBy(query.sort === 'id' ? 'id' : 'seq', direction);
    const rows = await q.offset(query.offset).limit(query.limit).execute();
    return rows.map((r) => this.changeView(r, principal));
  }

  private changeView(row: ChangeRow, user: Principal | { user: { id: string; fname: string; lname: string } }): object {
    const data = maskSecrets(row.bundle, JSON.parse(row.content) as BundleData, this.secretKey, {
      entity: `${row.entity_type}:${row.entity_id}`,
      version: row.id,
    });
    const u = user.user;
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

  // ---- commits ----------------------------------------------------------------------------------

  /**
   * Commits, in one transaction, the changes the commit carries (`changes`: those only, the caller's
   * staged changes stay staged) or else every change the caller has staged: each entity's own bundle
   * is replaced (or removed by reset_to_group), the changes are marked committed, and the commit is an
   * entry of the audit trail whose sha is the commit's. Devices whose configuration changed get it
   * pushed once the transaction is in.
   */
  async commit(principal: Principal, body: { message: string; changes?: ChangeRequest[] }, ip: string): Promise<object> {
    const result = await this.deps.store.transaction(async () => {
      const carried: ChangeRow[] = [];
      for (const [i, change] of (body.changes ?? []).entries()) carried.push(await this.stage(principal, change, `changes[${i}]`, true));
      // An empty `changes` is what qbee's clients leave out (omitempty): the staged changes are committed.
      const staged = carried.length > 0 ? carried : await this.q.staged(principal.user.id);
      if (staged.length === 0) throw badRequest('Nothing to commit: stage changes first (POST /change), or send them in `changes`.', {}, 'nothing_to_commit');
      // Roles may have changed since staging: every entity, and the files each change names, are checked again.
      for (const c of staged) {
        try {
          await this.requireEntity(principal, 'configuration:manage', { type: c.entity_type as EntityType, id: c.entity_id });
          await this.requireFiles(principal, c.bundle, JSON.parse(c.content) as BundleData);
        } catch (err) {
          if (!(err instanceof ApiError)) throw err;
          throw new ApiError(
            err.status,
            err.error,
            `Staged change ${c.sha} (${c.entity_type} ${c.entity_id}, ${c.bundle}): ${err.message} Discard it (DELETE /change/${c.sha}) to commit the others.`,
            {
              ...err.details,
              change: c.sha,
            },
          );
        }
      }
      const audit = await this.deps.audit.recordCommit({ user: principal.user, ip, message: body.message, changes: staged.map((c) => c.sha) });
      const now = new Date().toISOString();
      const db = this.deps.store.db;
      await db
        .insertInto('config_commits')
        .values({ sha: audit.sha, audit_id: audit.id, user_id: principal.user.id, message: body.message, created_at: now })
        .execute();
      for (const c of staged) {
        const data = JSON.parse(c.content) as BundleData;
        if (data.reset_to_group === true) {
          await db
            .deleteFrom('config_entities')
            .where('entity_type', '=', c.entity_type)
            .where('entity_id', '=', c.entity_id)
            .where('bundle', '=', c.bundle)
            .execute();
          continue;
        }
        const values = { extend: c.extend, data: c.content, commit_sha: audit.sha, commit_created: now };
        await db
          .insertInto('config_entities')
          .values({ entity_type: c.entity_type, entity_id: c.entity_id, bundle: c.bundle, ...values })
          .onConflict((oc) => oc.columns(['entity_type', 'entity_id', 'bundle']).doUpdateSet(values))
          .execute();
      }
      await db
        .updateTable('config_changes')
        .set({ status: 'committed', commit_sha: audit.sha, updated_at: now })
        .where(
          'id',
          'in',
          staged.map((c) => c.id),
        )
        .execute();
      return { sha: audit.sha, created: now, changes: staged.map((c) => c.sha) };
    });
    this.deps.store.afterCommit(() => this.schedulePropagation());
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
    const db = this.deps.store.db;
    const commit = await db.selectFrom('config_commits').selectAll().where('sha', '=', sha).executeTakeFirst();
    if (!commit) throw notFound(`Commit ${sha}`);
    const user = await db.selectFrom('users').select(['id', 'fname', 'lname']).where('id', '=', commit.user_id).executeTakeFirst();
    const who = { user: { id: commit.user_id, fname: user?.fname ?? '', lname: user?.lname ?? '' } };
    const rows = await db.selectFrom('config_changes').selectAll().where('commit_sha', '=', sha).orderBy('seq').execute();
    const changes: object[] = [];
    for (const r of rows) {
      if (await this.deps.access.mayConfigure(principal, 'configuration:read', { type: r.entity_type as EntityType, id: r.entity_id }))
        changes.push(this.changeView(r, who));
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
    const db = this.deps.store.db;
    // A page of commits answers their changes whole: bounded, or refused with what to ask instead.
    const size = await db
      .selectFrom('config_changes')
      .select((eb) => eb.fn.sum<number>(sql<number>`length(content)`).as('bytes'))
      .where('commit_sha', 'in', commitShas)
      .executeTakeFirst();
    if (Number(size?.bytes ?? 0) > MAX_LISTED_CHANGE_BYTES)
      throw badRequest(
        `The changes of these ${commitShas.length} commits exceed ${MAX_LISTED_CHANGE_BYTES / (1024 * 1024)} MiB: ask for fewer (items_per_page), or one at a time (GET /commit/{sha}).`,
        { field: 'items_per_page' },
        'too_large',
      );
    const rows = await db.selectFrom('config_changes').selectAll().where('commit_sha', 'in', commitShas).orderBy('seq').execute();
    const userIds = [...new Set(rows.map((r) => r.user_id))];
    const users = new Map(
      userIds.length ? (await db.selectFrom('users').select(['id', 'fname', 'lname']).where('id', 'in', userIds).execute()).map((u) => [u.id, u]) : [],
    );
    const reach = new Map<string, boolean>();
    for (const r of rows) {
      const key = `${r.entity_type}:${r.entity_id}`;
      if (!reach.has(key))
        reach.set(key, await this.deps.access.mayConfigure(principal, 'configuration:read', { type: r.entity_type as EntityType, id: r.entity_id }));
      if (!reach.get(key)) continue;
      const u = users.get(r.user_id);
      const view = this.changeView(r, { user: { id: r.user_id, fname: u?.fname ?? '', lname: u?.lname ?? '' } });
      const list = out.get(r.commit_sha as string) ?? [];
      list.push(view);
      out.set(r.commit_sha as string, list);
    }
    return out;
  }

  // ---- rendering --------------------------------------------------------------------------------

  /** The levels of an entity: for a node its chain root first and its tags; for a tag itself. With `staged`, the user's staged changes on top. */
  private async levelsFor(entity: Entity, chain: ChainRow[] | undefined, stagedBy?: string): Promise<{ nodes: Level[]; tags: Level[] }> {
    const down = chain ? [...chain].reverse() : [];
    const ranked = entity.type === 'tag' ? [{ tag: entity.id, rank: 0 }] : chain ? tagsDown(chain) : [];
    const keys: Entity[] = [...down.map((r) => ({ type: 'node' as const, id: r.node_id })), ...ranked.map((r) => ({ type: 'tag' as const, id: r.tag }))];
    const bundles = levelsOf(await this.q.entities(keys));
    if (stagedBy) applyStaged(bundles, await this.q.staged(stagedBy));
    return {
      nodes: down.map((r) => level('node', r.node_id, r.title, bundles)),
      tags: ranked.map((r) => ({ ...level('tag', r.tag, r.tag, bundles), rank: r.rank })),
    };
  }

  /** GET /config and /configpreview of a node or tag: `own` its own bundles, `all` rendered with what it inherits. */
  async entityConfig(principal: Principal, type: EntityType, id: string, scope: 'all' | 'own', preview: boolean): Promise<object> {
    const entity: Entity = { type, id };
    if (type === 'tag' && !TAG_PATTERN.test(id)) throw badRequest(`item_id must be a tag: ${TAG_RULE}.`, { field: 'item_id' });
    await this.requireEntity(principal, 'configuration:read', entity);
    const chain = type === 'node' ? await this.chainOf(id) : undefined;
    const { nodes, tags } = this.maskedLevels(await this.levelsFor(entity, chain, preview ? principal.user.id : undefined));
    const rendered = scope === 'own' ? render(entity, type === 'node' ? nodes.slice(-1) : [], type === 'tag' ? tags : []) : render(entity, nodes, tags);
    return { status: 'success', config: rendered };
  }

  /** GET /config/{device_id} and /configpreview/{node_id}: rendered with everything it inherits. */
  async nodeConfig(principal: Principal, nodeId: string, preview: boolean, devicesOnly: boolean): Promise<object> {
    const chain = await this.chainOf(nodeId);
    if (devicesOnly && chain[0].type !== 'device') throw notFound(`Device ${nodeId}`);
    return this.entityConfig(principal, 'node', nodeId, 'all', preview);
  }

  /**
   * Levels for answers: each level's credential fields as references bound to where they are stored
   * (the level's entity and the commit, or staged change, that stored them), masked before rendering
   * so a rendered value keeps the reference of its own level.
   */
  private maskedLevels<T extends Level>(levels: { nodes: Level[]; tags: T[] }): { nodes: Level[]; tags: T[] } {
    const mask = <L extends Level>(l: L): L => {
      const bundles = new Map<string, OwnBundle>();
      for (const [name, own] of l.bundles)
        bundles.set(name, {
          ...own,
          data: maskSecrets(name, own.data, this.secretKey, { entity: `${l.type}:${l.id}`, version: own.changeId ?? own.commitSha }),
        });
      return { ...l, bundles };
    };
    return { nodes: levels.nodes.map(mask), tags: levels.tags.map(mask) };
  }

  /**
   * qbee's Pushed of a device (GET /inventory/{id}): its committed configuration as its agent gets it,
   * secret values as references; the bundles only for a caller whose configuration:read reaches the
   * device (the commit id for anyone who reaches its inventory).
   */
  async pushedConfig(principal: Principal, deviceId: string): Promise<{ commit_id: string; bundles: string[]; bundle_data: Record<string, unknown> }> {
    const out = await this.deviceRendered(deviceId);
    if (!out) return { commit_id: '', bundles: [], bundle_data: {} };
    if (!(await this.deps.access.mayConfigure(principal, 'configuration:read', { type: 'node', id: deviceId })))
      return { commit_id: out.config.commit_id, bundles: [], bundle_data: {} };
    const bundle_data: Record<string, unknown> = {};
    for (const [name, data] of Object.entries(out.config.bundle_data))
      bundle_data[name] = maskSecrets(name, data as BundleData, this.secretKey, { entity: `node:${deviceId}`, version: out.config.commit_id });
    return { commit_id: out.config.commit_id, bundles: out.config.bundles, bundle_data };
  }

  /**
   * A device's committed configuration as its agent gets it: enabled bundles only, secrets in clear,
   * and (unless `digests` is false) the sha256 of each distributed file in the manifest.
   */
  private async deviceRendered(deviceId: string, digests = true): Promise<ReturnType<typeof pushable> | undefined> {
    const chain = await nodeChain(this.deps.store.db, deviceId);
    if (chain.length === 0 || chain[0].type !== 'device' || chain[chain.length - 1].node_id !== ROOT_NODE) return undefined;
    const { nodes, tags } = await this.levelsFor({ type: 'node', id: deviceId }, chain);
    const row = await this.deps.store.db.selectFrom('devices').select('attributes').where('device_id', '=', deviceId).executeTakeFirst();
    const rendered = render({ type: 'node', id: deviceId }, nodes, tags);
    return pushable(
      rendered,
      readAttributes(row?.attributes).custom ?? {},
      digests ? await this.fileDigests(rendered, new Map()) : new Map(),
      await this.agentDefaults(),
    );
  }

  /**
   * The file store's sha256 of each file the rendered configuration distributes; `known` keeps the
   * answers across devices of one propagation (a file is looked up once).
   */
  private async fileDigests(rendered: RenderedConfig, known: Map<string, Promise<string | undefined>>): Promise<Map<string, string | undefined>> {
    const out = new Map<string, string | undefined>();
    for (const file of distributedFiles(rendered.bundle_data)) {
      let digest = known.get(file);
      if (!digest) {
        digest = this.deps.files.metadata(`/${file}`).then(
          (meta) => meta.sha256 ?? meta.digest,
          () => undefined,
        );
        known.set(file, digest);
      }
      out.set(file, await digest);
    }
    return out;
  }

  // ---- agents -----------------------------------------------------------------------------------

  private schedulePropagation(): void {
    if (this.propagationQueued) return;
    this.propagationQueued = true;
    this.propagation = this.propagation
      .then(async () => {
        this.propagationQueued = false;
        await this.propagate();
      })
      .catch((err) => this.deps.logger.error({ err }, 'configuration not propagated'));
  }

  /**
   * Several brokers: another broker recorded a new configuration for these devices, whose agents are
   * connected here; they get it now. Requests arriving together are served by one rendering (one
   * read of the tree, as propagate), in turn with the other propagations.
   */
  pushCurrent(deviceIds: string[]): void {
    for (const id of deviceIds) this.wanted.add(id);
    if (this.wantedQueued) return;
    this.wantedQueued = true;
    this.propagation = this.propagation
      .then(async () => {
        this.wantedQueued = false;
        const ids = new Set(this.wanted);
        this.wanted.clear();
        await this.propagate(ids);
      })
      .catch((err) => this.deps.logger.error({ err }, 'configuration not sent to the agents'));
  }

  /** Waits for pushes scheduled so far (tests, shutdown). */
  async settled(): Promise<void> {
    await this.propagation;
  }

  /**
   * Renders every device from one read of the tree and the entities' bundles, records each
   * device's commit and digest, and pushes to connected agents whose configuration changed. With
   * `only`, renders just those devices and pushes to those connected here whatever their recorded
   * digest (another broker recorded it: see pushCurrent).
   */
  async propagate(only?: ReadonlySet<string>): Promise<number> {
    const db = this.deps.store.db;
    const readAt = new Date().toISOString();
    const nodeRows = await db.selectFrom('nodes').select(['node_id', 'parent_id', 'type', 'title', 'tags']).execute();
    const entityRows = await this.q.allEntities();
    const bundles = levelsOf(entityRows);
    const byId = new Map(nodeRows.map((r) => [r.node_id, r]));
    const chains = new Map<string, ChainRow[] | null>();
    const chainFor = (id: string, depth = 0): ChainRow[] | null => {
      const known = chains.get(id);
      if (known !== undefined) return known;
      const row = byId.get(id);
      let chain: ChainRow[] | null = null;
      if (row && depth < 64) {
        if (row.parent_id === null) chain = row.node_id === ROOT_NODE ? [row] : null;
        else {
          const up = chainFor(row.parent_id, depth + 1);
          chain = up ? [row, ...up] : null;
        }
      }
      chains.set(id, chain);
      return chain;
    };
    const states = new Map((await db.selectFrom('device_config').select(['device_id', 'digest']).execute()).map((r) => [r.device_id, r.digest]));
    const attributes = new Map((await db.selectFrom('devices').select(['device_id', 'attributes']).execute()).map((r) => [r.device_id, r.attributes]));
    let pushed = 0;
    const elsewhere: string[] = [];
    const fileDigests = new Map<string, Promise<string | undefined>>();
    // Read once per run: a change of the defaults changes every digest, so every device gets them.
    const defaults = await this.agentDefaults();
    // What a group passes down (its levels root → group, and the tags carried along) is worked out
    // once per group, not once per device: the per-device cost stays flat as the fleet grows.
    const groupParts = new Map<string, { nodes: Level[]; tags: (Level & { rank: number })[]; seen: Set<string> }>();
    const partsOf = (groupChain: ChainRow[]) => {
      const known = groupParts.get(groupChain[0].node_id);
      if (known) return known;
      const ranked = tagsDown(groupChain);
      const parts = {
        nodes: [...groupChain].reverse().map((r) => level('node', r.node_id, r.title, bundles)),
        tags: ranked.map((r) => ({ ...level('tag', r.tag, r.tag, bundles), rank: r.rank })),
        seen: new Set(ranked.map((r) => r.tag)),
      };
      groupParts.set(groupChain[0].node_id, parts);
      return parts;
    };
    for (const row of nodeRows) {
      if (row.type !== 'device' || (only && !only.has(row.node_id))) continue;
      const chain = chainFor(row.node_id);
      if (!chain || chain.length < 2) continue;
      const parts = partsOf(chain.slice(1));
      const ownTags = scopeOfChain([row]).tags.filter((tag) => !parts.seen.has(tag));
      const rendered = render(
        { type: 'node', id: row.node_id },
        [...parts.nodes, level('node', row.node_id, row.title, bundles)],
        [...parts.tags, ...ownTags.map((tag) => ({ ...level('tag', tag, tag, bundles), rank: chain.length - 1 }))],
      );
      const out = pushable(rendered, readAttributes(attributes.get(row.node_id)).custom ?? {}, await this.fileDigests(rendered, fileDigests), defaults);
      if (states.get(row.node_id) === out.digest && !only) continue;
      this.logDropped(row.node_id, out.dropped);
      await this.recordState(row.node_id, out.config.commit_id, out.digest);
      if (!this.deps.agents.isConnected(row.node_id)) continue;
      // Recorded above: the agent must get it now, from this broker or from the one holding it.
      if (this.push(row.node_id, out)) pushed += 1;
      else if (out.size <= MAX_PUSH_BYTES && this.deps.agents.pushElsewhere) elsewhere.push(row.node_id);
    }
    if (only) return pushed;
    if (elsewhere.length > 0) {
      this.deps.agents.pushElsewhere?.(elsewhere);
      pushed += elsewhere.length;
    }
    // Removed nodes keep no configuration (a node made later with the same id starts empty); what was
    // committed after the tree was read above is left for the next run.
    const orphans = [
      ...new Set(entityRows.filter((e) => e.entity_type === 'node' && !byId.has(e.entity_id) && e.commit_created < readAt).map((e) => e.entity_id)),
    ];
    for (let i = 0; i < orphans.length; i += 500) {
      await db
        .deleteFrom('config_entities')
        .where('entity_type', '=', 'node')
        .where('entity_id', 'in', orphans.slice(i, i + 500))
        .where('commit_created', '<', readAt)
        .execute();
    }
    // Devices no longer in the tree keep no state.
    const gone = [...states.keys()].filter((id) => byId.get(id)?.type !== 'device');
    for (let i = 0; i < gone.length; i += 500)
      await db
        .deleteFrom('device_config')
        .where('device_id', 'in', gone.slice(i, i + 500))
        .execute();
    return pushed;
  }

  private async agentDefaults(): Promise<AgentDefaults> {
    return (await this.deps.agentDefaults?.()) ?? {};
  }

  private async recordState(deviceId: string, commitSha: string, digest: string): Promise<void> {
    await this.deps.store.db
      .insertInto('device_config')
      .values({ device_id: deviceId, commit_sha: commitSha, digest, device_commit_sha: null, applied_at: null })
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ commit_sha: commitSha, digest }))
      .execute();
  }

  /** An agent connected: it gets its configuration now. */
  async onConnected(deviceId: string): Promise<void> {
    const out = await this.deviceRendered(deviceId);
    if (!out) return;
    this.logDropped(deviceId, out.dropped);
    await this.recordState(deviceId, out.config.commit_id, out.digest);
    this.push(deviceId, out);
  }

  private logDropped(deviceId: string, dropped: string[]): void {
    if (dropped.length === 0) return;
    this.deps.logger.warn(
      { deviceId, keys: dropped.slice(0, 20) },
      'device attributes holding a control or bidi character are not sent to the agent as parameters: correct them (PATCH /deviceattribute)',
    );
  }

  /** Sends a device its configuration; one larger than the agent takes in a message is not sent (logged). */
  private push(deviceId: string, out: { config: CommittedConfig; attributes: Record<string, string>; defaults: AgentDefaults; size: number }): boolean {
    if (out.size > MAX_PUSH_BYTES) {
      this.deps.logger.error({ deviceId, bytes: out.size }, 'configuration too large to send to the agent: not sent');
      return false;
    }
    return this.deps.agents.send(deviceId, { t: 'config', config: out.config, attributes: out.attributes, defaults: out.defaults });
  }

  /**
   * `config_applied`: the commit the agent applied (shown in the tree as device_commit_sha, and
   * config_propagated when it is the device's current commit) and the run's reports, checked and
   * bounded, to the report sink. An agent that applied an older commit gets the current one.
   */
  async onApplied(deviceId: string, m: Extract<AgentMessage, { t: 'config_applied' }>): Promise<void> {
    const now = new Date().toISOString();
    const db = this.deps.store.db;
    await db
      .insertInto('device_config')
      .values({ device_id: deviceId, commit_sha: null, digest: null, device_commit_sha: m.commit_id, applied_at: now })
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ device_commit_sha: m.commit_id, applied_at: now }))
      .execute();
    const { valid, refused } = m.reports;
    if (valid.length > 0 || Object.keys(refused).length > 0) {
      const rendered = valid.length > 0 ? await this.deviceRendered(deviceId) : undefined;
      const scrubbed = scrubReports(valid, rendered ? credentialValues(rendered.config.bundle_data) : []);
      await this.deps.reports.recordChecked(deviceId, { valid: scrubbed, refused });
    }
    const state = await db.selectFrom('device_config').select('commit_sha').where('device_id', '=', deviceId).executeTakeFirst();
    if (state && state.commit_sha !== null && state.commit_sha !== m.commit_id) await this.onConnected(deviceId);
  }

  /**
   * `file_request`: a file of the store that the device's configuration names is sent on a `file`
   * channel (bytes under the channel's credit flow, then eof); anything else is `file_refused`.
   */
  async onFileRequest(deviceId: string, m: Extract<AgentMessage, { t: 'file_request' }>): Promise<void> {
    if (!ID_PATTERN.test(m.id)) return;
    const id = m.id;
    const refuse = (error: string) => void this.deps.agents.send(deviceId, { t: 'file_refused', id, error });
    if (m.path === '' || m.path.length > 1024) return refuse('invalid path');
    // Counted from here: a peer asking faster than files go out is refused, whatever it asks for.
    // A device's requests count whether sent or waiting; past the slots, requests wait in a bounded queue.
    const active = this.sending.get(deviceId) ?? 0;
    const full = this.sendingTotal >= MAX_FILES;
    if (active >= MAX_FILES_PER_DEVICE || (full && this.fileQueue.length >= MAX_FILES_QUEUED))
      return refuse('busy: too many files in transfer; ask again later');
    this.sending.set(deviceId, active + 1);
    if (full) await new Promise<void>((granted) => this.fileQueue.push(granted));
    else this.sendingTotal += 1;
    try {
      await this.sendFile(deviceId, id, normalizeSource(m.path), refuse);
    } finally {
      const left = (this.sending.get(deviceId) ?? 1) - 1;
      if (left <= 0) this.sending.delete(deviceId);
      else this.sending.set(deviceId, left);
      // the slot goes to the first waiting request, or back to the pool
      const next = this.fileQueue.shift();
      if (next) next();
      else this.sendingTotal -= 1;
    }
  }

  private async sendFile(deviceId: string, id: string, path: string, refuse: (error: string) => void): Promise<void> {
    const out = await this.deviceRendered(deviceId, false);
    if (!out || !out.files.has(path)) return refuse('not in the configuration of this device');
    let meta: Awaited<ReturnType<ConfigFiles['metadata']>>;
    let download: Awaited<ReturnType<ConfigFiles['download']>>;
    try {
      meta = await this.deps.files.metadata(`/${path}`);
      download = await this.deps.files.download(`/${path}`);
    } catch (err) {
      return refuse(err instanceof ApiError && err.status === 404 ? 'no such file in the file store' : 'the file cannot be read');
    }
    let channel: Channel;
    try {
      ({ channel } = await this.deps.agents.open(deviceId, 'file', { id, path: `/${path}`, size: download.size, sha256: meta.sha256 ?? meta.digest ?? '' }));
    } catch (err) {
      download.stream.destroy();
      this.deps.logger.debug({ err, deviceId, path }, 'file channel not opened');
      return;
    }
    // A peer that stops granting credit holds a transfer slot: one making no progress for a while is cut.
    let timer: NodeJS.Timeout | undefined;
    const progress = () => {
      clearTimeout(timer);
      timer = setTimeout(() => channel.destroy(new Error('file transfer stalled')), FILE_STALL_MS);
      timer.unref();
    };
    download.stream.on('data', progress);
    progress();
    try {
      await pipeline(download.stream, channel);
    } catch (err) {
      this.deps.logger.debug({ err, deviceId, path }, 'file not sent in full');
      if (!channel.destroyed) channel.destroy();
    } finally {
      clearTimeout(timer);
    }
  }

  /** Per device of the tree: the commit it should run and the one its agent last applied. */
  async deviceStates(): Promise<Map<string, { device_commit_sha: string; config_propagated: boolean }>> {
    const rows = await this.deps.store.db.selectFrom('device_config').selectAll().execute();
    return new Map(
      rows.map((r) => [
        r.device_id,
        { device_commit_sha: r.device_commit_sha ?? '', config_propagated: r.device_commit_sha !== null && r.device_commit_sha === (r.commit_sha ?? '') },
      ]),
    );
  }
}

/** The tags a node carries or inherits, each with the depth it is first carried at from root (0). */
function tagsDown(chain: ChainRow[]): { tag: string; rank: number }[] {
  const out: { tag: string; rank: number }[] = [];
  const seen = new Set<string>();
  [...chain].reverse().forEach((row, depth) => {
    for (const tag of scopeOfChain([row]).tags) {
      if (seen.has(tag)) continue;
      seen.add(tag);
      out.push({ tag, rank: depth });
    }
  });
  return out;
}

/** The user's staged changes laid over the committed bundles, in the order staged. */
function applyStaged(bundles: Map<string, Map<string, OwnBundle>>, staged: ChangeRow[]): void {
  for (const c of staged) {
    const key = `${c.entity_type}:${c.entity_id}`;
    const data = JSON.parse(c.content) as BundleData;
    let m = bundles.get(key);
    if (!m) bundles.set(key, (m = new Map()));
    if (data.reset_to_group === true) m.delete(c.bundle);
    else m.set(c.bundle, { extend: Number(c.extend) === 1, data, commitSha: '', commitCreated: Date.parse(c.created_at), changeId: c.id });
  }
}

/**
 * The custom attributes an agent gets as parameters: one-line values only. The API refuses anything
 * else when attributes are written; a row stored before that rule (or edited by hand) may still
 * hold a newline, and such a value is left out here (its key in `dropped`, which the caller logs).
 */
export function parameterAttributes(custom: Record<string, string>): { attributes: Record<string, string>; dropped: string[] } {
  const attributes: Record<string, string> = {};
  const dropped: string[] = [];
  for (const [key, value] of Object.entries(custom)) {
    if (isSingleLine(key) && isSingleLine(value)) attributes[key] = value;
    else dropped.push(key);
  }
  return { attributes, dropped };
}

/**
 * What an agent gets: enabled bundles, without the broker's inheritance notes, file_distribution's
 * files with their sha256 (a plain field of the configuration); its digest decides whether to push,
 * so a new upload of a distributed file reaches the devices that use it.
 */
function pushable(rendered: RenderedConfig, custom: Record<string, string>, fileDigests: ReadonlyMap<string, string | undefined>, defaults: AgentDefaults) {
  const { attributes, dropped } = parameterAttributes(custom);
  const bundle_data: Record<string, unknown> = {};
  const bundles: string[] = [];
  for (const name of rendered.bundles) {
    const data = rendered.bundle_data[name];
    if (data.enabled === false) continue;
    const { inherited_from: _f, inherits: _i, inherited: _d, ...rest } = data;
    bundle_data[name] = rest;
    bundles.push(name);
  }
  const config: CommittedConfig = { commit_id: rendered.commit_id, bundles, bundle_data: withFileDigests(bundle_data, fileDigests) };
  const text = JSON.stringify({ config, attributes, defaults });
  const digest = crypto.createHash('sha256').update(text).digest('hex');
  return { config, attributes, defaults, dropped, files: referencedFiles(bundle_data), digest, size: Buffer.byteLength(text) };
}
