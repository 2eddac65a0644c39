/**
 * qbee's configuration bundles: their names (in the order the broker lists them), what a change's
 * content may hold, how an entity's bundle merges with what it inherits, and how secrets are kept
 * out of answers. Pure functions: the service and the tests use them alike.
 */
import crypto from 'node:crypto';
import { BUNDLES, fieldsAt, FILE_FIELDS, SECRET_FIELDS, type BundleName, type FoundField } from '../../shared/config-bundles.js';
import { invalid } from '../errors.js';

export { BUNDLES, type BundleName } from '../../shared/config-bundles.js';

export function isBundle(name: string): name is BundleName {
  return (BUNDLES as readonly string[]).includes(name);
}

/** qbee's Metadata fields: set by the client (enabled, extend, version, reset_to_group) or by the broker. */
export const METADATA_FIELDS = ['enabled', 'extend', 'version', 'bundle_commit_id', 'inherited', 'inherits', 'reset_to_group'] as const;

/** Largest bundle configuration, as JSON. */
export const MAX_BUNDLE_BYTES = 256 * 1024;
/** Deepest nesting of a bundle configuration. */
export const MAX_BUNDLE_DEPTH = 12;
/** Longest string anywhere in a bundle configuration. */
export const MAX_STRING = 64 * 1024;
/** Most entries of one list or object. */
export const MAX_ITEMS = 1000;

/**
 * The data fields of bundles whose qbee type is known field by field: a change naming another field
 * is refused (a typo must not silently do nothing). Bundles not listed take any field. Values are
 * checked for shape (bounded JSON) here and for meaning by the agent, which reports what it cannot apply.
 */
const FIELDS: Partial<Record<BundleName, readonly string[]>> = {
  settings: [
    'metrics',
    'reports',
    'remoteconsole',
    'software_inventory',
    'process_inventory',
    'agentinterval',
    'auto_update',
    'auto_update_window',
    'auto_update_downgrade',
  ],
  parameters: ['parameters', 'secrets'],
  package_management: ['pre_condition', 'items', 'reboot_mode', 'full_upgrade'],
  file_distribution: ['files'],
  connectivity_watchdog: ['threshold'],
  docker_containers: ['items', 'registry_auths'],
  podman_containers: ['items', 'registry_auths'],
};

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type BundleData = Record<string, Json>;

function checkJson(value: unknown, at: string, depth: number): void {
  if (depth > MAX_BUNDLE_DEPTH) throw invalid(`${at}: nested deeper than ${MAX_BUNDLE_DEPTH} levels.`, { field: at });
  if (value === null || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw invalid(`${at}: not a finite number.`, { field: at });
    return;
  }
  if (typeof value === 'string') {
    if (value.length > MAX_STRING) throw invalid(`${at}: longer than ${MAX_STRING} characters.`, { field: at });
    return;
  }
  if (Array.isArray(value)) {
    if (value.length > MAX_ITEMS) throw invalid(`${at}: more than ${MAX_ITEMS} entries.`, { field: at });
    value.forEach((v, i) => checkJson(v, `${at}[${i}]`, depth + 1));
    return;
  }
  if (typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length > MAX_ITEMS) throw invalid(`${at}: more than ${MAX_ITEMS} fields.`, { field: at });
    for (const k of keys) {
      if (k.length > 256) throw invalid(`${at}: a field name is longer than 256 characters.`, { field: at });
      checkJson((value as Record<string, unknown>)[k], `${at}.${k}`, depth + 1);
    }
    return;
  }
  throw invalid(`${at}: not JSON.`, { field: at });
}

function requireList(data: Record<string, unknown>, field: string, at: string): Record<string, unknown>[] {
  const v = data[field];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid(`${at}.${field} must be a list.`, { field: `${at}.${field}` });
  return v.map((item, i) => {
    if (!item || typeof item !== 'object' || Array.isArray(item)) throw invalid(`${at}.${field}[${i}] must be an object.`, { field: `${at}.${field}[${i}]` });
    return item as Record<string, unknown>;
  });
}

function requireStrings(item: Record<string, unknown>, fields: string[], at: string): void {
  for (const f of fields) {
    const v = item[f];
    if (v !== undefined && v !== null && typeof v !== 'string') throw invalid(`${at}.${f} must be a string.`, { field: `${at}.${f}` });
  }
}

/**
 * Checks a change's bundle configuration (qbee's `config` of a ChangeRequest): an object of the
 * bundle's fields and qbee's metadata, bounded. Returns it (a copy) with `extend` as given by the
 * change. Throws 400 naming the field.
 */
export function validateBundle(bundle: string, config: unknown): BundleData {
  if (!isBundle(bundle))
    throw invalid(`formtype: "${bundle.slice(0, 64)}" is not a configuration bundle; one of ${BUNDLES.join(', ')}.`, { field: 'formtype' });
  if (!config || typeof config !== 'object' || Array.isArray(config)) throw invalid('config must be an object: the bundle configuration.', { field: 'config' });
  const size = Buffer.byteLength(JSON.stringify(config));
  if (size > MAX_BUNDLE_BYTES) throw invalid(`config is ${size} bytes as JSON; at most ${MAX_BUNDLE_BYTES}.`, { field: 'config' }, 'too_large');
  checkJson(config, 'config', 0);
  const data = structuredClone(config) as BundleData;
  const fields = FIELDS[bundle];
  if (fields) {
    const allowed = new Set<string>([...METADATA_FIELDS, ...fields]);
    for (const key of Object.keys(data)) {
      if (!allowed.has(key))
        throw invalid(`config.${key.slice(0, 64)} is not a field of ${bundle}; fields: ${fields.join(', ')}.`, { field: `config.${key.slice(0, 64)}` });
    }
  }
  for (const f of ['enabled', 'extend', 'reset_to_group', 'inherited'] as const) {
    if (data[f] !== undefined && data[f] !== null && typeof data[f] !== 'boolean')
      throw invalid(`config.${f} must be true or false.`, { field: `config.${f}` });
  }
  if (data.version !== undefined && data.version !== null && typeof data.version !== 'string')
    throw invalid('config.version must be a string.', { field: 'config.version' });
  // Broker-set fields are not taken from clients.
  delete data.bundle_commit_id;
  delete data.inherited;
  delete data.inherits;
  if (bundle === 'parameters') {
    for (const list of ['parameters', 'secrets']) {
      requireList(data, list, 'config').forEach((p, i) => {
        requireStrings(p, ['key', 'value'], `config.${list}[${i}]`);
        if (typeof p.key !== 'string' || p.key === '')
          throw invalid(`config.${list}[${i}].key must be a non-empty string.`, { field: `config.${list}[${i}].key` });
      });
    }
  }
  if (bundle === 'file_distribution') {
    requireList(data, 'files', 'config').forEach((set, i) => {
      const at = `config.files[${i}]`;
      requireStrings(set, ['command', 'pre_condition'], at);
      requireList(set, 'templates', at).forEach((file, j) => {
        requireStrings(file, ['source', 'destination'], `${at}.templates[${j}]`);
        if (file.is_template !== undefined && typeof file.is_template !== 'boolean')
          throw invalid(`${at}.templates[${j}].is_template must be true or false.`, { field: `${at}.templates[${j}].is_template` });
      });
      requireList(set, 'parameters', at).forEach((p, j) => requireStrings(p, ['key', 'value'], `${at}.parameters[${j}]`));
    });
  }
  if (bundle === 'software_management') {
    requireList(data, 'items', 'config').forEach((item, i) => {
      requireList(item, 'config_files', `config.items[${i}]`).forEach((f, j) =>
        requireStrings(f, ['config_template', 'config_location'], `config.items[${i}].config_files[${j}]`),
      );
    });
  }
  return data;
}

// ---- merging (extend) ---------------------------------------------------------------------------

/** Fields that name an item of a list: an extending entity's item replaces the inherited one of the same name. */
const ITEM_KEYS = ['key', 'name', 'username', 'package', 'destination', 'url'];

function identity(item: Json): string | undefined {
  if (!item || typeof item !== 'object' || Array.isArray(item)) return JSON.stringify(item);
  for (const k of ITEM_KEYS) {
    const v = item[k];
    if (typeof v === 'string' && v !== '') return `${k}=${v}`;
  }
  return undefined;
}

function mergeValue(inherited: Json, own: Json): Json {
  if (Array.isArray(inherited) && Array.isArray(own)) {
    const out: Json[] = [];
    const at = new Map<string, number>();
    for (const item of [...inherited, ...own]) {
      const id = identity(item);
      const found = id === undefined ? undefined : at.get(id);
      if (found !== undefined) out[found] = item;
      else {
        if (id !== undefined) at.set(id, out.length);
        out.push(item);
      }
    }
    return out;
  }
  if (inherited && own && typeof inherited === 'object' && typeof own === 'object' && !Array.isArray(inherited) && !Array.isArray(own)) {
    const out: { [k: string]: Json } = { ...inherited };
    for (const [k, v] of Object.entries(own)) out[k] = k in out ? mergeValue(out[k], v) : v;
    return out;
  }
  return own;
}

/**
 * qbee's `extend`: the entity's bundle merged into what it inherits. Objects merge field by field,
 * lists are the inherited items then the entity's own (an own item replaces the inherited item of
 * the same key, name or username), and any other value of the entity replaces the inherited one.
 */
export function extendBundle(inherited: BundleData, own: BundleData): BundleData {
  return mergeValue(inherited, own) as BundleData;
}

// ---- secrets --------------------------------------------------------------------------------------

/** What an answer shows instead of a secret: a reference that names the value without revealing it. */
export const SECRET_REF_PREFIX = 'secret-ref:';

/**
 * Where a stored secret lives: the entity whose own bundle holds it, and the stored version (the id
 * of a staged change, or the sha of the commit that stored the entity's bundle). Both are bound into
 * the secret's reference.
 */
export interface SecretHome {
  entity: string;
  version: string;
}

/**
 * The reference of a secret: a keyed digest (the broker's key) of the value bound to where it is
 * stored — the entity, the stored version and the field (with its list item's other fields). Equal
 * values in two places (a guess staged beside the real secret) give unrelated references, so a
 * reference tells nothing about a value; sending it back unchanged (a client that re-sends what it
 * read) keeps the stored value (see restoreSecrets).
 */
export function secretRef(key: Buffer, home: SecretHome, at: string, value: string): string {
  return SECRET_REF_PREFIX + crypto.createHmac('sha256', key).update(`${home.entity}\n${home.version}\n${at}\n${value}`).digest('hex').slice(0, 32);
}

/** The credential fields of one bundle's data (the one list, SECRET_FIELDS), each holding a non-empty string. */
function secretFields(bundle: string, data: BundleData): FoundField[] {
  const paths = isBundle(bundle) ? (SECRET_FIELDS[bundle] ?? []) : [];
  return paths.flatMap((path) => fieldsAt(data, path)).filter((f) => typeof f.value === 'string' && f.value !== '');
}

/** A copy of bundle data for answers: every credential field (SECRET_FIELDS) as its reference. */
export function maskSecrets(bundle: string, data: BundleData, key: Buffer, home: SecretHome): BundleData {
  const copy = structuredClone(data);
  for (const f of secretFields(bundle, copy)) f.set(secretRef(key, home, f.at, f.value as string));
  return copy;
}

/** The credential values a rendered configuration (bundle name → data) holds, for scrubbing what comes back from its device. */
export function credentialValues(bundleData: Record<string, unknown>): string[] {
  const out = new Set<string>();
  for (const [bundle, data] of Object.entries(bundleData))
    if (data && typeof data === 'object' && !Array.isArray(data)) for (const f of secretFields(bundle, data as BundleData)) out.add(f.value as string);
  return [...out];
}

/** Shortest credential scrubbed from reports: shorter strings would blank ordinary words. */
const MIN_SCRUBBED = 4;

/**
 * Reports as shown to readers: every credential value of the device's configuration (credentialValues)
 * replaced by `[redacted]` in the text and in the log (base64, compared byte for byte), so an agent
 * echoing a command's output does not hand a registry password or a secret parameter to report readers.
 */
export function scrubReports<R extends { text: string; log?: string }>(reports: R[], values: string[]): R[] {
  const secrets = values.filter((v) => v.length >= MIN_SCRUBBED).sort((a, b) => b.length - a.length);
  if (secrets.length === 0) return reports;
  const latin = secrets.map((v) => Buffer.from(v, 'utf8').toString('latin1'));
  const scrub = (text: string, list: string[], mark: string) => list.reduce((t, v) => t.split(v).join(mark), text);
  return reports.map((r) => ({
    ...r,
    text: scrub(r.text, secrets, REDACTED),
    ...(r.log !== undefined ? { log: Buffer.from(scrub(Buffer.from(r.log, 'base64').toString('latin1'), latin, REDACTED), 'latin1').toString('base64') } : {}),
  }));
}

/** What an audit entry shows of a credential field. */
export const REDACTED = '[redacted]';

/**
 * A change request (`{formtype, config}`) or a commit (`{changes: [...]}`) as a refused call's audit
 * entry shows it: every credential field (SECRET_FIELDS) of each bundle as `[redacted]`. Takes any
 * input: a refused body may be malformed.
 */
export function auditableChangeBody(body: unknown): unknown {
  const mask = (request: unknown): unknown => {
    if (!request || typeof request !== 'object' || Array.isArray(request)) return request;
    const r = request as { formtype?: unknown; config?: unknown };
    if (typeof r.formtype !== 'string' || !r.config || typeof r.config !== 'object') return request;
    const config = structuredClone(r.config);
    const paths = isBundle(r.formtype) ? (SECRET_FIELDS[r.formtype] ?? []) : Object.values(SECRET_FIELDS).flat();
    for (const f of paths.flatMap((path) => fieldsAt(config, path))) if (f.value !== undefined && f.value !== null) f.set(REDACTED);
    return { ...r, config };
  };
  if (!body || typeof body !== 'object' || Array.isArray(body)) return body;
  const b = body as { changes?: unknown };
  return Array.isArray(b.changes) ? { ...b, changes: b.changes.map(mask) } : mask(body);
}

/**
 * Where a change's credential field is a reference the broker answered for this entity's stored
 * data (`known`: its committed bundle and the caller's staged one, each with its home), the value it
 * stands for. A reference from anywhere else — another entity, another field, a made-up one — is refused.
 */
export function restoreSecrets(bundle: string, data: BundleData, known: { data: BundleData; home: SecretHome }[], key: Buffer): BundleData {
  const wanted = secretFields(bundle, data).filter((f) => (f.value as string).startsWith(SECRET_REF_PREFIX));
  if (wanted.length === 0) return data;
  const byRef = new Map<string, string>();
  for (const k of known)
    for (const f of secretFields(bundle, k.data)) byRef.set(`${f.at}\n${secretRef(key, k.home, f.at, f.value as string)}`, f.value as string);
  const copy = structuredClone(data);
  for (const f of secretFields(bundle, copy)) {
    if (!(f.value as string).startsWith(SECRET_REF_PREFIX)) continue;
    const value = byRef.get(`${f.at}\n${f.value as string}`);
    if (value === undefined)
      throw invalid(`config${f.at}: a secret reference this entity does not hold there; send the value itself.`, { field: `config${f.at}` });
    f.set(value);
  }
  return copy;
}

// ---- files ---------------------------------------------------------------------------------------

/** A file-store path as configurations name it, compared without its leading slashes. */
export function normalizeSource(source: string): string {
  return source.replace(/^\/+/, '');
}

/** The file-store paths one bundle's data names (FILE_FIELDS), as written. */
export function bundleFiles(bundle: string, data: BundleData): string[] {
  const paths = isBundle(bundle) ? (FILE_FIELDS[bundle] ?? []) : [];
  return paths.flatMap((path) => fieldsAt(data, path)).flatMap((f) => (typeof f.value === 'string' && f.value !== '' ? [f.value] : []));
}

/** The file-store files a rendered configuration names (every FILE_FIELDS field of its bundles), normalised. */
export function referencedFiles(bundleData: Record<string, unknown>): Set<string> {
  const out = new Set<string>();
  for (const [bundle, data] of Object.entries(bundleData)) {
    if (!data || typeof data !== 'object' || Array.isArray(data)) continue;
    for (const file of bundleFiles(bundle, data as BundleData)) out.add(normalizeSource(file));
  }
  return out;
}

/** A file_distribution source naming one file of the store as written (no `$(key)` the agent resolves). */
const LITERAL_SOURCE = (source: string) => source !== '' && !source.includes('$(');

/** The file-store files file_distribution names literally: the ones whose digest the manifest can carry. */
export function distributedFiles(bundleData: Record<string, unknown>): Set<string> {
  const out = new Set<string>();
  const fd = bundleData.file_distribution as { files?: unknown } | undefined;
  if (!fd || !Array.isArray(fd.files)) return out;
  for (const set of fd.files as { templates?: unknown }[]) {
    if (!set || !Array.isArray(set.templates)) continue;
    for (const t of set.templates as { source?: unknown }[])
      if (t && typeof t.source === 'string' && LITERAL_SOURCE(t.source)) out.add(normalizeSource(t.source));
  }
  return out;
}

/**
 * The manifest of file_distribution as the agent gets it: each file it names carries the sha256 of
 * the file store's copy (`digest`), so the agent leaves a file already in place alone without
 * fetching it. The digest is the broker's own (one a client put in its change is dropped); a file
 * whose digest is not known (missing, or named through a parameter) carries none. Returns a copy.
 */
export function withFileDigests(bundleData: Record<string, unknown>, digests: ReadonlyMap<string, string | undefined>): Record<string, unknown> {
  const fd = bundleData.file_distribution as { files?: unknown } | undefined;
  if (!fd || !Array.isArray(fd.files)) return bundleData;
  const files = (fd.files as unknown[]).map((set) => {
    if (!set || typeof set !== 'object' || !Array.isArray((set as { templates?: unknown }).templates)) return set;
    const templates = ((set as { templates: unknown[] }).templates as unknown[]).map((t) => {
      if (!t || typeof t !== 'object' || Array.isArray(t)) return t;
      const { digest: _client, ...file } = t as { source?: unknown; digest?: unknown };
      const digest = typeof file.source === 'string' && LITERAL_SOURCE(file.source) ? digests.get(normalizeSource(file.source)) : undefined;
      return digest ? { ...file, digest } : file;
    });
    return { ...(set as object), templates };
  });
  return { ...bundleData, file_distribution: { ...fd, files } };
}
