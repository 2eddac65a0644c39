/**
 * Configuration management (qbee's model), put together from its parts: changes staged per user
 * (staging.ts), commits that apply all of a user's staged changes at once (commits.ts), the rendered
 * configuration of nodes and tags (rendering.ts), and the link to agents — the configuration pushed
 * on commit and on connect, what the agent reports it applied (agent-link.ts), and the file-store
 * files its configuration names, sent on request (file-sending.ts). The rest of the broker calls
 * this class; its parts share the store, the access checks (entities.ts) and the secret key.
 */
import crypto from 'node:crypto';
import type { AgentMessage } from '../../shared/wire.js';
import type { Principal } from '../access/principal.js';
import { AgentLink, WATCH_INTERVAL_MS } from './agent-link.js';
import { Commits } from './commits.js';
import type { ChangeListQuery, ChangeRequest, ConfigDeps, SecretKey } from './deps.js';
import { EntityAccess } from './entities.js';
import { FileSending } from './file-sending.js';
import type { EntityType } from './render.js';
import { Rendering } from './rendering.js';
import { Staging } from './staging.js';
import { ConfigStore } from './store.js';

export class ConfigService {
  private readonly secrets: SecretKey = { key: Buffer.alloc(0) };
  private readonly staging: Staging;
  private readonly commits: Commits;
  private readonly rendering: Rendering;
  private readonly link: AgentLink;
  private readonly fileSending: FileSending;

  constructor(private readonly deps: ConfigDeps) {
    const db = deps.store.db;
    const q = new ConfigStore(db);
    const entities = new EntityAccess(db, deps.access);
    const defaults = async () => (await deps.agentDefaults?.()) ?? {};
    this.staging = new Staging(q, entities, this.secrets);
    this.rendering = new Rendering(db, q, entities, deps.files, this.secrets, defaults);
    this.link = new AgentLink(db, q, this.rendering, deps.agents, deps.reports, deps.logger, deps.connectWrites);
    this.commits = new Commits(deps.store, q, deps.audit, entities, this.staging, () => this.link.schedulePropagation());
    this.fileSending = new FileSending(this.rendering, deps.files, deps.agents, deps.logger);
  }

  async init(): Promise<void> {
    const key = await this.deps.settings.getOrCreate<string>('config.secret_ref_key', () => crypto.randomBytes(32).toString('hex'));
    this.secrets.key = Buffer.from(key, 'hex');
  }

  close(): Promise<void> {
    return this.link.close();
  }

  /** See AgentLink.watch: devices rendered again after changes to the tree and attributes. */
  watch(epoch: { value: number }, intervalMs = WATCH_INTERVAL_MS): void {
    this.link.watch(epoch, intervalMs);
  }

  // ---- changes (staging.ts) ---------------------------------------------------------------------

  createChange(principal: Principal, req: ChangeRequest): Promise<object> {
    return this.staging.createChange(principal, req);
  }

  getChange(principal: Principal, sha: string): Promise<object> {
    return this.staging.getChange(principal, sha);
  }

  deleteChange(principal: Principal, sha: string): Promise<void> {
    return this.staging.deleteChange(principal, sha);
  }

  deleteChanges(principal: Principal): Promise<void> {
    return this.staging.deleteChanges(principal);
  }

  listChanges(principal: Principal, query: ChangeListQuery): Promise<object[]> {
    return this.staging.listChanges(principal, query);
  }

  // ---- commits (commits.ts) ---------------------------------------------------------------------

  commit(principal: Principal, body: { message: string; changes?: ChangeRequest[] }, ip: string): Promise<object> {
    return this.commits.commit(principal, body, ip);
  }

  getCommit(principal: Principal, sha: string): Promise<object> {
    return this.commits.getCommit(principal, sha);
  }

  commitChanges(principal: Principal, commitShas: string[]): Promise<Map<string, object[]>> {
    return this.commits.commitChanges(principal, commitShas);
  }

  // ---- rendering (rendering.ts) -----------------------------------------------------------------

  entityConfig(principal: Principal, type: EntityType, id: string, scope: 'all' | 'own', preview: boolean): Promise<object> {
    return this.rendering.entityConfig(principal, type, id, scope, preview);
  }

  nodeConfig(principal: Principal, nodeId: string, preview: boolean, devicesOnly: boolean): Promise<object> {
    return this.rendering.nodeConfig(principal, nodeId, preview, devicesOnly);
  }

  pushedConfig(principal: Principal, deviceId: string): Promise<{ commit_id: string; bundles: string[]; bundle_data: Record<string, unknown> }> {
    return this.rendering.pushedConfig(principal, deviceId);
  }

  // ---- agents (agent-link.ts, file-sending.ts) --------------------------------------------------

  pushCurrent(deviceIds: string[]): void {
    this.link.pushCurrent(deviceIds);
  }

  settled(): Promise<void> {
    return this.link.settled();
  }

  propagate(only?: ReadonlySet<string>): Promise<number> {
    return this.link.propagate(only);
  }

  onConnected(deviceId: string): Promise<void> {
    return this.link.onConnected(deviceId);
  }

  onApplied(deviceId: string, m: Extract<AgentMessage, { t: 'config_applied' }>): Promise<void> {
    return this.link.onApplied(deviceId, m);
  }

  onFileRequest(deviceId: string, m: Extract<AgentMessage, { t: 'file_request' }>): Promise<void> {
    return this.fileSending.onFileRequest(deviceId, m);
  }

  deviceStates(): Promise<Map<string, { device_commit_sha: string; config_propagated: boolean }>> {
    return this.link.deviceStates();
  }
}
