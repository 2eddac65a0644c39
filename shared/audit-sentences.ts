/**
 * An audit entry as a sentence an operator reads ("Moved group lab under site-2", "Renamed device
 * x to y", "Committed 3 changes: …"), from its event code and the change set the broker recorded
 * (`options`: `{params, before, after}` for a change with a subject, `{params, query, body}` for a
 * refused call). Every event the broker writes has its sentence here (a test walks the route
 * table); an event this module does not know reads as a generic sentence, never as nothing.
 *
 * A refused or failed entry reads "Tried to …": its result and reason are shown beside it.
 */

/** The fields of an entry a sentence reads (AuditEntry has them all). */
export interface SentenceEntry {
  event: string;
  action: string;
  result: string;
  reason?: string | null;
  device_id?: string | null;
  options?: unknown;
}

/** A node's name by its id (devices and groups the reader may see), when known. */
export type NameOf = (id: string) => string | undefined;

type Row = Record<string, unknown>;

/** A clause in two forms: what was done ("moved …") and what was tried ("move …"). */
interface Clause {
  done: string;
  tried: string;
}

interface Context {
  entry: SentenceEntry;
  params: Row;
  query: Row;
  body: Row;
  before: Row | null;
  after: Row | null;
  name: (id: unknown, fallback?: unknown) => string;
}

const clause = (verb: string, infinitive: string, rest: string): Clause => ({ done: `${verb} ${rest}`.trim(), tried: `${infinitive} ${rest}`.trim() });

const row = (value: unknown): Row => (value && typeof value === 'object' && !Array.isArray(value) ? (value as Row) : {});
const text = (value: unknown): string | undefined =>
  typeof value === 'string' && value !== '' ? value : typeof value === 'number' ? String(value) : undefined;
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const quoted = (value: unknown) => `“${text(value) ?? ''}”`;
const DEVICE_ID = /^[0-9a-f]{64}$/;
const kindOf = (id: string) => (DEVICE_ID.test(id) ? 'device' : 'group');

/** The fields a change touched, from its before and after (secrets are already `[redacted]`). */
function fieldsOf(c: Context): string[] {
  return [...new Set([...Object.keys(c.before ?? {}), ...Object.keys(c.after ?? {})])].filter(
    (k) => !['updated_at', 'updated_by', 'created_at', 'created_by'].includes(k),
  );
}

/** ` (name, email)` — the fields changed, when the entry recorded them. */
function changedFields(c: Context): string {
  const fields = fieldsOf(c).map((f) => f.replace(/_/g, ' '));
  return fields.length ? `: ${fields.join(', ')}` : '';
}

/** Who a user entry concerns: their email, before or after, else their id. */
function userOf(c: Context): string {
  return text(c.after?.email) ?? text(c.before?.email) ?? text(c.body.email) ?? text(c.params.user_id) ?? 'a user';
}

function roleOf(c: Context): string {
  return quoted(text(c.after?.name) ?? text(c.before?.name) ?? text(c.body.name) ?? text(c.params.role_id) ?? '');
}

/** The node an entry concerns: its device, or the node in its path. */
function nodeOf(c: Context): string {
  return c.name(c.params.node_id ?? c.params.device_id ?? c.entry.device_id, c.after?.title ?? c.before?.title);
}

/** A group tree change: each node's before and after (as recorded), or the changes asked for (refused). */
function treeClauses(c: Context): Clause[] {
  const clauses: Clause[] = [];
  if (c.before || c.after) {
    const before = c.before ?? {};
    const after = c.after ?? {};
    for (const id of new Set([...Object.keys(before), ...Object.keys(after)])) {
      // A node created has no before (null), one deleted no after.
      const b = before[id] === undefined || before[id] === null ? undefined : row(before[id]);
      const a = after[id] === undefined || after[id] === null ? undefined : row(after[id]);
      const title = c.name(id, a?.title ?? b?.title);
      if (!b && a) clauses.push(clause('created', 'create', `group ${quotedName(a.title, id)} under ${c.name(a.parent_id)}`));
      else if (b && !a) clauses.push(clause('deleted', 'delete', `${kindOf(id)} ${quotedName(b.title, id)}`));
      else if (a && b) {
        if ('title' in a && a.title !== b.title)
          clauses.push(clause('renamed', 'rename', `${kindOf(id)} ${quotedName(b.title, id)} to ${quotedName(a.title, id)}`));
        if ('parent_id' in a && a.parent_id !== b.parent_id) clauses.push(clause('moved', 'move', `${kindOf(id)} ${title} under ${c.name(a.parent_id)}`));
        if ('tags' in a && JSON.stringify(a.tags) !== JSON.stringify(b.tags)) clauses.push(tagsClause(`${kindOf(id)} ${title}`, a.tags));
      }
    }
    return clauses.length ? clauses : [clause('changed', 'change', 'the group tree')];
  }
  const changes = Array.isArray(c.body.changes) ? c.body.changes : [];
  for (const change of changes.slice(0, 20).map(row)) {
    const data = row(change.data);
    const id = text(data.node_id) ?? '';
    const what = `${kindOf(id)} ${c.name(id)}`;
    if (change.action === 'create') clauses.push(clause('created', 'create', `group ${quoted(data.title)} under ${c.name(data.parent_id)}`));
    else if (change.action === 'rename') clauses.push(clause('renamed', 'rename', `${what} to ${quoted(data.title)}`));
    else if (change.action === 'move') clauses.push(clause('moved', 'move', `${what} under ${c.name(data.parent_id)}`));
    else if (change.action === 'delete') clauses.push(clause('deleted', 'delete', what));
  }
  if (changes.length > 20) clauses.push(clause('made', 'make', `${plural(changes.length - 20, 'more change')}`));
  return clauses.length ? clauses : [clause('changed', 'change', 'the group tree')];
}

const quotedName = (title: unknown, id: string) => (text(title) ? text(title)! : id);

function tagsClause(what: string, tags: unknown): Clause {
  const list = Array.isArray(tags) ? tags.filter((t): t is string => typeof t === 'string') : [];
  return list.length ? clause('set', 'set', `the tags of ${what} to ${list.join(', ')}`) : clause('cleared', 'clear', `the tags of ${what}`);
}

const REMOTE_WHAT: Record<string, string> = {
  console: 'a console',
  tunnel: 'a tunnel',
  copy: 'a file copy',
  reload: 'an agent reload',
  qbee: 'a qbee-v1 connection',
  connect: 'a qbee-v1 connection',
};

/** Remote access: `remote.<kind>[.start|.denied|.end|.attach|.watch]`. */
function remoteClause(c: Context): Clause | undefined {
  const m = /^remote\.([a-z]+)(?:\.(start|denied|end|attach|watch))?$/.exec(c.entry.event);
  if (!m) return undefined;
  const what = REMOTE_WHAT[m[1]] ?? REMOTE_WHAT[c.entry.action] ?? `a ${m[1]} session`;
  const on = c.entry.device_id ? ` on ${c.name(c.entry.device_id)}` : '';
  const options = row(c.entry.options);
  const port = text(options.port) ? ` to port ${text(options.port)}` : '';
  if (m[2] === 'end') return clause('ended', 'end', `${what}${on}`);
  if (m[2] === 'attach') return clause('re-attached to', 're-attach to', `${what}${on}`);
  if (m[2] === 'watch') return clause('watched', 'watch', `${what}${on}, read-only`);
  if (m[1] === 'reload') return clause('reloaded', 'reload', `the agent${on}`);
  return clause('opened', 'open', `${what}${port}${on}`);
}

/** The sentence of every event the broker writes, by its code. */
/** How a sign-in was proven, as `session.login` records it. */
const SIGN_IN_METHODS: Record<string, string> = {
  password: 'with a password',
  'password+recovery_code': 'with a password and a recovery code',
};

const SENTENCES: Record<string, (c: Context) => Clause | Clause[]> = {
  // Devices and the group tree
  'device.tree.change': treeClauses,
  'device.tags.update': (c) => tagsClause(`${kindOf(text(c.params.node_id) ?? '')} ${nodeOf(c)}`, c.after?.tags ?? c.body.tags),
  'device.attributes.update': (c) => clause('changed', 'change', `the attributes of ${nodeOf(c)}${changedFields(c)}`),
  'device.approve': (c) => clause('approved', 'approve', `device ${c.name(c.entry.device_id ?? c.body.node_id, c.after?.title ?? c.before?.hostname)}`),
  'device.reject': (c) => clause('rejected', 'reject', `the pending device ${c.name(c.params.node_id, c.before?.title ?? c.before?.hostname)}`),
  'device.remove': (c) => clause('removed', 'remove', `device ${nodeOf(c)}`),
  'device.enrol': (c) => clause('enrolled', 'enrol', c.entry.device_id ? `device ${c.name(c.entry.device_id)}` : 'a device'),
  'bootstrapkey.create': () => clause('created', 'create', 'a bootstrap key'),
  'bootstrapkey.update': (c) => clause('changed', 'change', `a bootstrap key${changedFields(c)}`),
  'bootstrapkey.delete': () => clause('deleted', 'delete', 'a bootstrap key'),
  // Configuration
  'config.change': () => clause('staged', 'stage', 'a configuration change'),
  'config.discard': (c) =>
    text(c.params.sha)
      ? clause('discarded', 'discard', `the staged change ${text(c.params.sha)!.slice(0, 8)}`)
      : clause('discarded', 'discard', 'every staged change'),
  'config.commit': (c) => {
    const options = row(c.entry.options);
    const changes = Array.isArray(options.changes) ? options.changes.length : 0;
    return clause('committed', 'commit', `${plural(changes, 'change')}${text(options.message) ? `: ${text(options.message)}` : ''}`);
  },
  // Users, roles, the account
  'user.create': (c) => clause('created', 'create', `user ${userOf(c)}`),
  'user.replace': (c) => userChange(c),
  'user.update': (c) => userChange(c),
  'user.delete': (c) => clause('deleted', 'delete', `user ${userOf(c)}`),
  'user.password_reset': (c) => clause('sent', 'send', `a password reset to user ${userOf(c)}`),
  'role.create': (c) => clause('created', 'create', `role ${roleOf(c)}`),
  'role.replace': (c) => clause('changed', 'change', `role ${roleOf(c)}${changedFields(c)}`),
  'role.delete': (c) => clause('deleted', 'delete', `role ${roleOf(c)}`),
  'settings.two_factor': () => clause('changed', 'change', 'the account’s two-factor sign-in policy'),
  'company.update': (c) => clause('changed', 'change', `the company record${changedFields(c)}`),
  'profile.update': (c) => clause('changed', 'change', `their profile${changedFields(c)}`),
  'profile.password': () => clause('changed', 'change', 'their password'),
  'profile.totp.start': () => clause('began', 'begin', 'setting up an authenticator app'),
  'profile.totp.confirm': () => clause('turned on', 'turn on', 'sign-in with an authenticator app'),
  'profile.totp.remove': () => clause('removed', 'remove', 'their authenticator app'),
  'profile.recovery_codes.regenerate': () => clause('replaced', 'replace', 'the recovery codes of their authenticator app'),
  'ssh.certificate': () => clause('got', 'get', 'an SSH certificate for the gateway'),
  'ssh.key.add': (c) => clause('registered', 'register', `the SSH key ${text(row(row(c.entry.options).after).fingerprint) ?? ''}`.trimEnd()),
  'ssh.key.remove': (c) => clause('removed', 'remove', `the SSH key ${text(row(row(c.entry.options).before).fingerprint) ?? ''}`.trimEnd()),
  'password.set': () => clause('set', 'set', 'a password from an emailed link'),
  'auth.device_code.approve': () => clause('approved', 'approve', 'a sign-in from the command line'),
  'auth.device_code.decline': () => clause('declined', 'decline', 'a sign-in from the command line'),
  'session.login': (c) => clause('signed in', 'sign in', SIGN_IN_METHODS[text(row(c.entry.options).method) ?? ''] ?? ''),
  'session.refresh': () => clause('renewed', 'renew', 'their session'),
  'session.device_code': () => clause('signed in', 'sign in', 'from the command line'),
  // Billing
  'billing.checkout': () => clause('started', 'start', 'an order of seats'),
  'billing.portal': () => clause('opened', 'open', 'the billing portal'),
  'billing.cancel': (c) => clause('cancelled', 'cancel', `subscription ${text(c.params.uuid) ?? ''}`),
  // Files
  'files.upload': (c) => clause('uploaded', 'upload', fileName(c, 'a file')),
  'files.createdir': (c) => clause('created', 'create', fileName(c, 'a folder', 'folder')),
  'files.move': (c) => clause('moved', 'move', fileName(c, 'a file')),
  'files.delete': (c) => clause('deleted', 'delete', fileName(c, 'a file')),
  // Remote access
  'portmap.create': (c) => clause('added', 'add', `a port map${portmapOf(c)}`),
  'portmap.update': (c) => clause('changed', 'change', `a port map${portmapOf(c)}${changedFields(c)}`),
  'portmap.delete': (c) => clause('deleted', 'delete', `a port map${portmapOf(c)}`),
  'recording.read': () => clause('played', 'play', 'a session recording'),
  // Vulnerabilities
  'cve.status': (c) => clause('set', 'set', `the status of ${text(c.params.cve_id) ?? 'a CVE'}${text(c.after?.status) ? ` to ${text(c.after?.status)}` : ''}`),
  'cve.delete': (c) => clause('deleted', 'delete', `the decision on ${text(c.params.cve_id) ?? 'a CVE'}`),
  'cve.import': () => clause('imported', 'import', 'vulnerability advisories'),
  // The trail itself
  'audit.checkpoint': () => clause('deleted', 'delete', 'audit entries past their retention'),
  'audit.refusals': (c) => clause('summarised', 'summarise', `refused calls${c.entry.reason ? ` (${c.entry.reason})` : ''}`),
};

/** Every event code with a sentence of its own (remote access is matched by its pattern besides). */
export const SENTENCE_EVENTS: readonly string[] = Object.keys(SENTENCES);

function userChange(c: Context): Clause {
  const disabledNow = c.after?.disabled ?? c.body.disabled;
  const fields = fieldsOf(c);
  if (fields.length === 1 && fields[0] === 'disabled' && disabledNow !== undefined) {
    return disabledNow === true || disabledNow === 1
      ? clause('disabled', 'disable', `user ${userOf(c)}`)
      : clause('re-enabled', 're-enable', `user ${userOf(c)}`);
  }
  return clause('changed', 'change', `user ${userOf(c)}${changedFields(c)}`);
}

function fileName(c: Context, otherwise: string, kind = 'file'): string {
  const path = text(c.query.path) ?? text(c.body.path) ?? text(c.query.name) ?? text(c.body.name);
  return path ? `${kind} ${path}` : otherwise;
}

function portmapOf(c: Context): string {
  const map = c.after ?? c.before ?? c.body;
  const port = text(map.remote_port) ?? text(map.port);
  const device = text(map.device_id) ?? c.entry.device_id ?? undefined;
  return `${port ? ` to port ${port}` : ''}${device ? ` on ${c.name(device)}` : ''}`;
}

/** The sentence of an entry. `nameOf` turns node ids into names the reader may see. */
export function auditSentence(entry: SentenceEntry, nameOf: NameOf = () => undefined): string {
  const options = row(entry.options);
  const context: Context = {
    entry,
    params: row(options.params),
    query: row(options.query),
    body: row(options.body),
    before: options.before === undefined || options.before === null ? null : row(options.before),
    after: options.after === undefined || options.after === null ? null : row(options.after),
    name: (id, fallback) => {
      const key = text(id);
      if (!key) return text(fallback) ?? 'a node';
      if (key === 'root') return 'the top of the tree';
      if (key === 'unassigned_group') return 'the unassigned devices';
      return nameOf(key) ?? text(fallback) ?? (DEVICE_ID.test(key) ? key.slice(0, 12) : key);
    },
  };
  const sentence = SENTENCES[entry.event];
  const made = sentence ? sentence(context) : remoteClause(context);
  const clauses = made === undefined ? [] : Array.isArray(made) ? made : [made];
  const tried = entry.result !== 'ok' && entry.result !== 'allowed' && entry.result !== 'ended';
  if (clauses.length === 0) return `${tried ? 'Tried to call' : 'Called'} ${entry.action || 'the broker'} (event ${entry.event})`;
  const said = clauses.map((c) => (tried ? c.tried : c.done)).join('; ');
  return capitalised(tried ? `tried to ${said}` : said);
}

const capitalised = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);
