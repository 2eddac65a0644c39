/**
 * The configuration the broker sends, checked before the engine keeps it: its shape and bounds, the
 * device attributes usable as parameters (one line each), the account's defaults; then what each
 * bundle's data says of itself (enabled, its commit) and the secret values reports must not show.
 */
import type { AgentDefaults, CommittedConfig } from '../../shared/protocol.js';
import { CONTROL_CHARACTERS } from '../../shared/text.js';
import { object } from './parse.js';

/** qbee's default agent interval, minutes. */
export const DEFAULT_INTERVAL_MINUTES = 5;
/** The longest interval a configuration may set, minutes (a day). */
export const MAX_INTERVAL_MINUTES = 24 * 60;
const MAX_BUNDLES = 64;
const MAX_ATTRIBUTES = 1000;
const REDACTED = '********';

export interface StoredConfig {
  config: CommittedConfig;
  attributes: Record<string, string>;
  /** keys of device attributes left out because their value holds a control character (not stored) */
  dropped?: string[];
  /** the account's defaults that came with it (the run interval without a settings bundle) */
  defaults: AgentDefaults;
}

/** The account's defaults as the broker sent them: a field out of range is left out (the agent's own default holds). */
export function checkDefaults(defaults: unknown): AgentDefaults {
  if (!defaults || typeof defaults !== 'object' || Array.isArray(defaults)) return {};
  const minutes = (defaults as { agent_interval?: unknown }).agent_interval;
  return typeof minutes === 'number' && Number.isInteger(minutes) && minutes >= 1 && minutes <= MAX_INTERVAL_MINUTES ? { agent_interval: minutes } : {};
}

/** Checks the shape of a `config` message from the broker; throws saying what is wrong. */
export function checkConfig(config: unknown, attributes: unknown, defaults?: unknown): StoredConfig {
  const c = object(config, 'config');
  if (typeof c.commit_id !== 'string' || c.commit_id.length > 128) throw new Error('config.commit_id must be a string of at most 128 characters');
  if (!Array.isArray(c.bundles) || c.bundles.length > MAX_BUNDLES || !c.bundles.every((b) => typeof b === 'string' && b.length > 0 && b.length <= 64))
    throw new Error(`config.bundles must be a list of at most ${MAX_BUNDLES} bundle names`);
  const data = c.bundle_data === undefined || c.bundle_data === null ? {} : object(c.bundle_data, 'config.bundle_data');
  const attrs: Record<string, string> = {};
  const dropped: string[] = [];
  if (attributes !== undefined && attributes !== null) {
    const a = object(attributes, 'attributes');
    for (const [key, value] of Object.entries(a).slice(0, MAX_ATTRIBUTES)) {
      if (typeof value !== 'string' || key.length > 256 || value.length > 65536) continue;
      // Device attributes are one line of text (anyone with device:manage writes them): a newline
      // would start another line of a template or a command, so such a value is never a parameter.
      if (CONTROL_CHARACTERS.test(value) || CONTROL_CHARACTERS.test(key)) dropped.push(key);
      else attrs[key] = value;
    }
  }
  return {
    config: { commit_id: c.commit_id, bundles: [...new Set(c.bundles as string[])], bundle_data: data },
    attributes: attrs,
    ...(dropped.length > 0 ? { dropped } : {}),
    defaults: checkDefaults(defaults),
  };
}

/** A bundle's `enabled` (absent: on) and its commit id, from its data. */
export function bundleMeta(raw: unknown): { enabled: boolean; commitId: string } {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return { enabled: true, commitId: '' };
  const r = raw as Record<string, unknown>;
  return { enabled: r.enabled !== false, commitId: typeof r.bundle_commit_id === 'string' ? r.bundle_commit_id.slice(0, 128) : '' };
}

/** The values to hide from reports: secrets, longest first so that a secret containing another is hidden whole. */
export function secretsOf(config: CommittedConfig): string[] {
  const params = config.bundle_data.parameters;
  if (!config.bundles.includes('parameters') || params === null || typeof params !== 'object') return [];
  const secrets = (params as { secrets?: unknown }).secrets;
  if (!Array.isArray(secrets)) return [];
  return secrets
    .map((s) => (s && typeof s === 'object' ? (s as { value?: unknown }).value : undefined))
    .filter((v): v is string => typeof v === 'string' && v.length > 0)
    .sort((a, b) => b.length - a.length);
}

export function redact(value: string, secrets: readonly string[]): string {
  let out = value;
  for (const secret of secrets) out = out.split(secret).join(REDACTED);
  return out;
}
