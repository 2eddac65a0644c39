/**
 * What the configuration domain is handed (its collaborators, named by what it uses of them), the
 * requests its API takes, and its limits: shared by the parts of the domain (staging, commits,
 * rendering, the agent link, file sending) that ConfigService puts together.
 */
import type { Logger } from 'pino';
import type { AgentDefaults, ChannelKind, ChannelParams, ControlMessage } from '../../shared/protocol.js';
import type { Channel } from '../../shared/mux.js';
import type { CheckedReports } from '../../shared/reports.js';
import type { AccessService } from '../access/access.js';
import type { AuditService } from '../audit/service.js';
import type { WriteQueue } from '../db/batch.js';
import type { Store } from '../db/database.js';
import type { SettingsStore } from '../settings.js';
import type { EntityType } from './render.js';

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
  /** Where the state of a connecting agent's configuration is written: with the other connects of the same turn. */
  connectWrites?: WriteQueue;
}

/**
 * The key binding credential references to where they are stored (maskSecrets, restoreSecrets):
 * read from the settings at init, after the parts holding this are built.
 */
export interface SecretKey {
  key: Buffer;
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

/** A node or a tag: what a configuration is committed on. */
export interface Entity {
  type: EntityType;
  id: string;
}

/** Most changes one user may have staged at once. */
export const MAX_STAGED = 500;
/** Most changes carried inline by one commit. */
export const MAX_INLINE_CHANGES = 100;

export const unixSeconds = (iso: string) => Math.floor(Date.parse(iso) / 1000);
