/**
 * The Configure area (configuration:read with device:read to see, configuration:manage to change):
 * pick a group, a device or a tag; see each bundle's effective configuration and where it comes from
 * (`inherited_from`); edit the entity's own bundle in a form (the common bundles) or as JSON (the
 * others), staged as a change; list the staged changes with a diff against the committed state;
 * commit them with a message or discard them. The device page's "Show configuration" is here too.
 */
import { useMemo, useState } from 'preact/hooks';
import type { GroupTree, GroupTreeNode } from '../../../shared/api-types.js';
import { BUNDLES } from '../../../shared/config-bundles.js';
import { api, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import {
  BUNDLE_FORMS,
  editable,
  isObject,
  lineDiff,
  maskSecrets,
  newItem,
  parseJsonObject,
  pretty,
  validate,
  type FieldSpec,
  type Json,
  type JsonObject,
} from '../config-forms.js';
import { Link, useLocation, withQuery } from '../router.js';
import { ErrorBox, formatTime, Loading, Notice, PageTitle, Tags, useAction, useLoad } from '../ui.js';
import { pruneTree } from './devices.js';

/** qbee's bundles, in the broker's listing order. */
const BUNDLE_NAMES: readonly string[] = BUNDLES;

type EntityType = 'node' | 'tag';

interface Source {
  type: string;
  id: string;
  title: string;
}

interface RenderedConfig {
  status: string;
  config: {
    id: string;
    type: EntityType;
    commit_id: string;
    commit_created: number;
    bundles: string[];
    bundle_data: Record<string, JsonObject & { inherited_from?: Source[]; extend?: boolean }>;
  };
}

interface Change {
  id: string;
  sha: string;
  status: 'new' | 'committed';
  content: { node_id?: string; tag?: string; formtype: string; extend: boolean; config: JsonObject };
  created: number;
  user_name: string;
}

const configPath = (base: 'config' | 'configpreview', type: EntityType, id: string) => `/${base}/${type}/${encodeURIComponent(id)}`;

function loadConfig(base: 'config' | 'configpreview', type: EntityType, id: string, scope: 'all' | 'own') {
  return api.get<RenderedConfig>(configPath(base, type, id), { scope });
}

/** Titles of the tree's nodes by id, to name the entities of changes. */
function titles(node: GroupTreeNode | undefined, out = new Map<string, string>()): Map<string, string> {
  if (!node) return out;
  out.set(node.node_id, node.title || node.node_id);
  for (const c of node.nodes ?? []) titles(c, out);
  return out;
}

/** The device ids of the tree. */
function deviceIds(node: GroupTreeNode | undefined, out = new Set<string>()): Set<string> {
  if (!node) return out;
  if (node.type === 'device') out.add(node.node_id);
  for (const c of node.nodes ?? []) deviceIds(c, out);
  return out;
}

function entityHref(type: EntityType, id: string, bundle?: string) {
  return withQuery('/configure', { type, id, bundle });
}

function SourceList({ sources }: { sources: Source[] | undefined }) {
  if (!sources?.length) return <span class="muted">nowhere (not configured)</span>;
  return (
    <ol class="sources" data-testid="inherited-from">
      {sources.map((s) => (
        <li key={`${s.type}:${s.id}`}>
          <span class="badge">{s.type}</span>
          {s.type === 'tag' ? <span class="tag">{s.title || s.id}</span> : s.title || s.id}
        </li>
      ))}
    </ol>
  );
}

// ---- the picker: the group tree (groups and devices) and the tags ----

function PickerNode({ node, selected }: { node: GroupTreeNode; selected: string }) {
  const link = (
    <Link
      href={entityHref('node', node.node_id)}
      aria-current={selected === node.node_id ? 'true' : undefined}
      class={node.type === 'device' ? 'device-name' : 'group-name'}
    >
      {node.title || node.node_id}
    </Link>
  );
  if (node.type === 'device') return <li class="device-row">{link}</li>;
  return (
    <li class="group-row">
      {link} <Tags tags={node.tags} />
      {(node.nodes ?? []).length > 0 && (
        <ul>
          {node.nodes.map((c) => (
            <PickerNode key={c.node_id} node={c} selected={selected} />
          ))}
        </ul>
      )}
    </li>
  );
}

function Picker({ tree, tags, selected }: { tree?: GroupTreeNode; tags: string[]; selected: string }) {
  const [text, setText] = useState('');
  const shown = useMemo(() => (tree ? pruneTree(tree, { text, tag: '', status: '' }) : null), [tree, text]);
  return (
    <nav class="config-picker" aria-label="Entities">
      <div class="field">
        <label for="cfg-find">Find a group or device</label>
        <input id="cfg-find" type="search" value={text} onInput={(e) => setText(e.currentTarget.value)} />
      </div>
      {shown ? (
        <ul class="tree">
          <PickerNode node={shown} selected={selected} />
        </ul>
      ) : (
        <p class="muted">Nothing matches.</p>
      )}
      {tags.length > 0 && (
        <>
          <h2 class="small">Tags</h2>
          <ul class="tag-picker">
            {tags.map((t) => (
              <li key={t}>
                <Link href={entityHref('tag', t)} class="tag" aria-current={selected === `tag:${t}` ? 'true' : undefined}>
                  {t}
                </Link>
              </li>
            ))}
          </ul>
        </>
      )}
    </nav>
  );
}

// ---- the form of a bundle ----

/** The datalist of the file store's files offered for file sources (the spec's "Configure, File selector", files:read). */
const FILE_LIST_ID = 'cfg-store-files';

function FileStoreList() {
  const files = useLoad(
    () =>
      api
        .get<{ items: { path: string; is_dir: boolean }[] }>('/files', { search: JSON.stringify({ path: '^/.*' }), items_per_page: 1000, sort_field: 'path' })
        .then((r) => r.items.filter((f) => !f.is_dir).map((f) => f.path))
        .catch(() => [] as string[]),
    [],
  );
  return (
    <datalist id={FILE_LIST_ID}>
      {(files.data ?? []).map((p) => (
        <option key={p} value={p} />
      ))}
    </datalist>
  );
}

/**
 * The spec's "Configure, User and Ports popups" (inventory:read): on a device, its users and listening
 * ports from its inventory, offered as suggestions in the user name and destination port fields.
 */
const INVENTORY_LIST_ID = { users: 'cfg-device-users', ports: 'cfg-device-ports' } as const;

function portOf(socket: unknown): string {
  const m = typeof socket === 'string' ? /:(\d+)$/.exec(socket) : null;
  return m ? m[1] : '';
}

function DeviceInventoryLists({ deviceId }: { deviceId: string }) {
  const lists = useLoad(async () => {
    const get = (itemType: 'users' | 'ports') =>
      api
        .get<{ items?: Record<string, unknown>[] }>(`/inventoryreport/${encodeURIComponent(deviceId)}`, { item_type: itemType, items_per_page: 1000 })
        .then((r) => r.items ?? [])
        .catch(() => []);
    const [users, ports] = await Promise.all([get('users'), get('ports')]);
    return {
      users: [...new Set(users.map((u) => String(u.user ?? '')).filter(Boolean))],
      ports: [...new Set(ports.map((p) => portOf(p.socket)).filter(Boolean))].sort((a, b) => Number(a) - Number(b)),
    };
  }, [deviceId]);
  return (
    <>
      <datalist id={INVENTORY_LIST_ID.users}>
        {(lists.data?.users ?? []).map((u) => (
          <option key={u} value={u} />
        ))}
      </datalist>
      <datalist id={INVENTORY_LIST_ID.ports}>
        {(lists.data?.ports ?? []).map((p) => (
          <option key={p} value={p} />
        ))}
      </datalist>
    </>
  );
}

function getAt(value: JsonObject, key: string): Json | undefined {
  return value[key];
}

function FieldEditor({
  field,
  value,
  onChange,
  errors,
  path,
  disabled,
}: {
  field: FieldSpec;
  value: Json | undefined;
  onChange: (v: Json) => void;
  errors: Record<string, string>;
  path: string;
  disabled: boolean;
}) {
  const id = `cfg-${path.replace(/\./g, '-')}`;
  const error = errors[path];
  const help = field.help && <small class="hint">{field.help}</small>;
  const err = error && (
    <small class="field-error" role="alert">
      {error}
    </small>
  );
  switch (field.kind) {
    case 'bool': {
      // Not set (absent: the agent's default or what is inherited) is neither on nor off: the box
      // shows a dash and the word says so.
      const state = value === true ? 'on' : value === false ? 'off' : 'not set';
      return (
        <div class="field bool-field">
          <label class="check">
            <input
              id={id}
              type="checkbox"
              checked={value === true}
              ref={(el) => {
                if (el) el.indeterminate = value !== true && value !== false;
              }}
              disabled={disabled}
              onChange={(e) => onChange(e.currentTarget.checked)}
            />
            <span>{field.label}</span>
            <span class={`bool-state ${state === 'not set' ? 'unset' : state}`} data-testid={`state-${path}`}>
              {state}
            </span>
          </label>
          {help}
        </div>
      );
    }
    case 'select':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          <select id={id} value={typeof value === 'string' ? value : field.options[0]} disabled={disabled} onChange={(e) => onChange(e.currentTarget.value)}>
            {field.options.map((o) => (
              <option key={o} value={o}>
                {o}
              </option>
            ))}
          </select>
          {help}
          {err}
        </div>
      );
    case 'number':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          <input
            id={id}
            type="number"
            min={field.min}
            max={field.max}
            value={typeof value === 'number' ? value : ''}
            disabled={disabled}
            aria-invalid={error ? 'true' : undefined}
            onInput={(e) => {
              const raw = e.currentTarget.value;
              onChange(raw === '' ? null : Number(raw));
            }}
          />
          {help}
          {err}
        </div>
      );
    case 'text':
    case 'secret':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          {field.kind === 'secret' ? (
            <input
              id={id}
              type="password"
              autocomplete="new-password"
              value={typeof value === 'string' ? value : ''}
              disabled={disabled}
              aria-invalid={error ? 'true' : undefined}
              onInput={(e) => onChange(e.currentTarget.value)}
            />
          ) : (
            <input
              id={id}
              type="text"
              autocomplete="off"
              list={field.fileStore ? FILE_LIST_ID : field.fromInventory ? INVENTORY_LIST_ID[field.fromInventory] : undefined}
              placeholder={field.placeholder}
              value={typeof value === 'string' ? value : value === undefined || value === null ? '' : String(value)}
              disabled={disabled}
              aria-invalid={error ? 'true' : undefined}
              onInput={(e) => onChange(e.currentTarget.value)}
            />
          )}
          {help}
          {err}
        </div>
      );
    case 'strings':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          <textarea
            id={id}
            rows={3}
            value={Array.isArray(value) ? value.join('\n') : ''}
            disabled={disabled}
            aria-invalid={error ? 'true' : undefined}
            onInput={(e) =>
              onChange(
                e.currentTarget.value
                  .split('\n')
                  .map((s) => s.trim())
                  .filter(Boolean),
              )
            }
          />
          {help}
          {err}
        </div>
      );
    case 'object': {
      const obj = isObject(value) ? value : {};
      return (
        <fieldset class="config-object">
          <legend>{field.label}</legend>
          {help}
          {field.fields.map((f) => (
            <FieldEditor
              key={f.key}
              field={f}
              value={getAt(obj, f.key)}
              path={`${path}.${f.key}`}
              errors={errors}
              disabled={disabled}
              onChange={(v) => onChange({ ...obj, [f.key]: v })}
            />
          ))}
        </fieldset>
      );
    }
    case 'list': {
      const list = Array.isArray(value) ? value : [];
      return (
        <fieldset class="config-list">
          <legend>{field.label}</legend>
          {help}
          {list.map((item, i) => {
            const obj = isObject(item) ? item : {};
            return (
              <div class="config-item" key={i} data-testid={`${path}.${i}`}>
                <div class="config-item-fields">
                  {field.fields.map((f) => (
                    <FieldEditor
                      key={f.key}
                      field={f}
                      value={getAt(obj, f.key)}
                      path={`${path}.${i}.${f.key}`}
                      errors={errors}
                      disabled={disabled}
                      onChange={(v) => onChange(list.map((x, j) => (j === i ? { ...obj, [f.key]: v } : x)))}
                    />
                  ))}
                </div>
                {!disabled && (
                  <button
                    type="button"
                    class="small"
                    aria-label={`Remove ${field.itemLabel} ${i + 1}`}
                    onClick={() => onChange(list.filter((_, j) => j !== i))}
                  >
                    Remove
                  </button>
                )}
              </div>
            );
          })}
          {list.length === 0 && <p class="muted small">None.</p>}
          {!disabled && (
            <button type="button" class="small" onClick={() => onChange([...list, newItem(field.fields)])}>
              Add {field.itemLabel}
            </button>
          )}
        </fieldset>
      );
    }
    default:
      return null;
  }
}

// ---- one bundle of one entity ----

function BundleEditor({
  type,
  id,
  title,
  bundle,
  effective,
  own,
  staged,
  mayEdit,
  onStaged,
}: {
  type: EntityType;
  id: string;
  title: string;
  bundle: string;
  effective?: JsonObject & { inherited_from?: Source[] };
  own?: JsonObject & { extend?: boolean };
  staged?: Change;
  mayEdit: boolean;
  onStaged: (text: string) => void;
}) {
  const form = BUNDLE_FORMS[bundle];
  const start = staged ? editable(staged.content.config) : editable(own);
  const [value, setValue] = useState<JsonObject>(start);
  const [extend, setExtend] = useState<boolean>(staged ? staged.content.extend : own?.extend === true);
  const [mode, setMode] = useState<'form' | 'json'>(form ? 'form' : 'json');
  const [jsonText, setJsonText] = useState(JSON.stringify(start, null, 2));
  const [jsonError, setJsonError] = useState('');
  const [errors, setErrors] = useState<Record<string, string>>({});
  const action = useAction();
  const enabled = value.enabled !== false;

  const post = (config: JsonObject, ext: boolean) =>
    action.run(async () => {
      await api.post('/change', { ...(type === 'tag' ? { tag: id } : { node_id: id }), formtype: bundle, extend: ext, config });
      onStaged(`${bundle} staged for ${type === 'tag' ? `tag ${id}` : title}. Commit it to apply.`);
    });

  const stage = (e: Event) => {
    e.preventDefault();
    let config = value;
    if (mode === 'json') {
      const parsed = parseJsonObject(jsonText);
      if (!parsed.value) {
        setJsonError(parsed.error ?? 'Invalid');
        return;
      }
      config = parsed.value;
    }
    if (form) {
      const found = validate(form.fields, config);
      setErrors(found);
      if (Object.keys(found).length > 0) return;
    }
    void post({ ...config, enabled: config.enabled !== false }, extend);
  };

  const shownEffective = effective ? maskSecrets(bundle, editable(effective)) : undefined;
  const sources = effective?.inherited_from;
  const inheritedOnly = sources && sources.length > 0 && !sources.some((s) => s.id === id);

  return (
    <div class="bundle-editor" data-testid={`bundle-${bundle}`}>
      <h2 id="h-bundle">{bundle}</h2>
      {form && <p class="muted">{form.help}</p>}
      <section class="boxed" aria-labelledby="h-effective">
        <h3 id="h-effective">Effective configuration (committed, with inheritance)</h3>
        <p class="small">
          Comes from: <SourceList sources={sources} />
        </p>
        {inheritedOnly && <p class="small muted">Inherited: this entity has no own {bundle} configuration.</p>}
        {shownEffective ? (
          <pre class="config-json" data-testid="effective-json">
            {pretty(shownEffective)}
          </pre>
        ) : (
          <p class="muted small">Not configured.</p>
        )}
      </section>
      {!mayEdit ? (
        <section class="boxed" aria-labelledby="h-own">
          <h3 id="h-own">Own configuration</h3>
          {own ? <pre class="config-json">{pretty(maskSecrets(bundle, editable(own)))}</pre> : <p class="muted small">None: everything is inherited.</p>}
        </section>
      ) : (
        <form class="boxed" onSubmit={stage} aria-labelledby="h-edit" noValidate>
          <h3 id="h-edit">{staged ? 'Edit the staged change' : 'Change the own configuration'}</h3>
          <div class="button-row">
            <label class="check">
              <input type="checkbox" checked={enabled} onChange={(e) => setValue({ ...value, enabled: e.currentTarget.checked })} />
              <span>Enabled</span>
            </label>
            <label class="check" title="Merge with the inherited configuration instead of replacing it">
              <input type="checkbox" checked={extend} onChange={(e) => setExtend(e.currentTarget.checked)} />
              <span>Extend the inherited configuration</span>
            </label>
            {form && (
              <button
                type="button"
                class="small"
                onClick={() => {
                  if (mode === 'form') {
                    setJsonText(JSON.stringify(value, null, 2));
                    setMode('json');
                  } else {
                    const parsed = parseJsonObject(jsonText);
                    if (!parsed.value) return setJsonError(parsed.error ?? 'Invalid');
                    setJsonError('');
                    setValue(parsed.value);
                    setMode('form');
                  }
                }}
              >
                {mode === 'form' ? 'Edit as JSON' : 'Edit as form'}
              </button>
            )}
          </div>
          {mode === 'form' && form ? (
            form.fields.map((f) => (
              <FieldEditor
                key={f.key}
                field={f}
                value={value[f.key]}
                path={f.key}
                errors={errors}
                disabled={false}
                onChange={(v) => setValue({ ...value, [f.key]: v })}
              />
            ))
          ) : (
            <div class={`field${jsonError ? ' has-error' : ''}`}>
              <label for="cfg-json">Configuration (JSON, qbee’s field names)</label>
              <textarea
                id="cfg-json"
                class="json-editor"
                rows={14}
                spellcheck={false}
                value={jsonText}
                aria-invalid={jsonError ? 'true' : undefined}
                onInput={(e) => {
                  setJsonText(e.currentTarget.value);
                  setJsonError('');
                }}
              />
              {jsonError && (
                <small class="field-error" role="alert">
                  {jsonError}
                </small>
              )}
            </div>
          )}
          {Object.keys(errors).length > 0 && (
            <p class="field-error" role="alert">
              Correct the {Object.keys(errors).length === 1 ? 'field' : 'fields'} marked above.
            </p>
          )}
          <ErrorBox error={action.error} title="The change was refused" />
          <div class="button-row">
            <button type="submit" class="primary" disabled={action.busy}>
              Stage change
            </button>
            {own && (
              <button type="button" disabled={action.busy} onClick={() => void post({ reset_to_group: true }, false)}>
                Reset to inherited
              </button>
            )}
          </div>
        </form>
      )}
    </div>
  );
}

function EntityConfig({
  type,
  id,
  bundle,
  title,
  changes,
  onStaged,
}: {
  type: EntityType;
  id: string;
  bundle: string;
  title: string;
  changes: Change[];
  onStaged: (text: string) => void;
}) {
  const effective = useLoad(() => loadConfig('config', type, id, 'all'), [type, id]);
  const own = useLoad(() => loadConfig('config', type, id, 'own'), [type, id]);
  const mayEdit = allowed('configureModify');
  const stagedHere = changes.filter((c) => (type === 'tag' ? c.content.tag === id : c.content.node_id === id));
  const error = effective.error ?? own.error;
  if (error) return <ErrorBox error={error} />;
  if (!effective.data || !own.data) return <Loading what="the configuration" />;
  const eff = effective.data.config;
  const mine = own.data.config;
  const stateOf = (b: string) => {
    if (stagedHere.some((c) => c.content.formtype === b)) return 'staged';
    if (mine.bundle_data[b]) return 'own';
    if (eff.bundle_data[b]) return 'inherited';
    return '';
  };
  return (
    <div>
      <h2 class="entity-title">
        {type === 'tag' ? 'Tag' : 'Node'} <strong>{title}</strong>{' '}
        {eff.commit_id && (
          <span class="muted small">
            last commit <code>{eff.commit_id.slice(0, 12)}</code>
          </span>
        )}
      </h2>
      <div class="bundle-tabs" role="tablist" aria-label="Bundles">
        {BUNDLE_NAMES.map((b) => {
          const state = stateOf(b);
          return (
            <Link key={b} role="tab" aria-selected={b === bundle ? 'true' : 'false'} href={entityHref(type, id, b)} class={`bundle-tab ${state}`}>
              {b}
              {state && <span class="badge">{state}</span>}
            </Link>
          );
        })}
      </div>
      <BundleEditor
        key={`${type}:${id}:${bundle}:${stagedHere.find((c) => c.content.formtype === bundle)?.sha ?? ''}:${eff.commit_id}`}
        type={type}
        id={id}
        title={title}
        bundle={bundle}
        effective={eff.bundle_data[bundle]}
        own={mine.bundle_data[bundle]}
        staged={stagedHere.find((c) => c.content.formtype === bundle)}
        mayEdit={mayEdit}
        onStaged={onStaged}
      />
    </div>
  );
}

// ---- staged changes: diff, discard, commit ----

function Diff({ before, after }: { before: string; after: string }) {
  const lines = lineDiff(before, after);
  return (
    <pre class="diff" data-testid="diff">
      {lines.map((l, i) => (
        <span key={i} class={l.op === '+' ? 'add' : l.op === '-' ? 'del' : ''}>
          {l.op} {l.text}
          {'\n'}
        </span>
      ))}
    </pre>
  );
}

function ChangeDiff({ change }: { change: Change }) {
  const type: EntityType = change.content.tag ? 'tag' : 'node';
  const id = (change.content.tag ?? change.content.node_id) as string;
  const committed = useLoad(() => loadConfig('config', type, id, 'own').catch(() => null), [type, id, change.sha]);
  if (committed.loading && !committed.data) return <Loading what="the committed state" />;
  const before = committed.data?.config.bundle_data[change.content.formtype];
  const beforeText = before ? pretty({ ...editable(before), extend: before.extend === true }) : '';
  const after = change.content.config.reset_to_group === true ? '' : pretty({ ...editable(change.content.config), extend: change.content.extend });
  return <Diff before={beforeText} after={after} />;
}

function StagedChanges({ changes, names, onChanged }: { changes: Change[]; names: Map<string, string>; onChanged: (text: string) => void }) {
  const [message, setMessage] = useState('');
  const [messageError, setMessageError] = useState('');
  const action = useAction();
  const mayEdit = allowed('configureModify');
  const commit = (e: Event) => {
    e.preventDefault();
    if (!message.trim()) {
      setMessageError('Say what the commit does.');
      return;
    }
    setMessageError('');
    void action.run(async () => {
      const r = await api.post<{ sha: string }>('/commit', { action: 'commit', message: message.trim() });
      setMessage('');
      onChanged(`Committed ${changes.length} change${changes.length === 1 ? '' : 's'} (${r.sha.slice(0, 12)}): connected devices apply it now.`);
    });
  };
  return (
    <section class="panel" aria-labelledby="h-staged" data-testid="staged-changes">
      <div class="panel-head">
        <h2 id="h-staged">Staged changes ({changes.length})</h2>
        {mayEdit && changes.length > 0 && (
          <button
            type="button"
            class="small"
            disabled={action.busy}
            onClick={() =>
              void action.run(async () => {
                await api.del('/changes');
                onChanged('All staged changes discarded.');
              })
            }
          >
            Discard all
          </button>
        )}
      </div>
      {changes.length === 0 && <p class="muted">No staged changes. Changes you stage are yours until you commit them.</p>}
      <ul class="changes">
        {changes.map((c) => {
          const type: EntityType = c.content.tag ? 'tag' : 'node';
          const id = (c.content.tag ?? c.content.node_id) as string;
          return (
            <li key={c.sha} class="change" data-testid={`change-${c.content.formtype}`}>
              <div class="change-head">
                <Link href={entityHref(type, id, c.content.formtype)}>
                  <strong>{c.content.formtype}</strong> of {type === 'tag' ? `tag ${id}` : (names.get(id) ?? id)}
                </Link>
                <span class="muted small">
                  {c.content.config.reset_to_group === true ? 'reset to inherited' : c.content.extend ? 'extends' : 'replaces'} · {formatTime(c.created)}
                </span>
                {mayEdit && (
                  <button
                    type="button"
                    class="small"
                    aria-label={`Discard the ${c.content.formtype} change`}
                    disabled={action.busy}
                    onClick={() =>
                      void action.run(async () => {
                        await api.del(`/change/${c.sha}`);
                        onChanged(`${c.content.formtype} change discarded.`);
                      })
                    }
                  >
                    Discard
                  </button>
                )}
              </div>
              <ChangeDiff change={c} />
            </li>
          );
        })}
      </ul>
      {mayEdit && changes.length > 0 && (
        <form class="inline-form" onSubmit={commit}>
          <div class={`field grow${messageError ? ' has-error' : ''}`}>
            <label for="cfg-message">Commit message</label>
            <input
              id="cfg-message"
              value={message}
              maxLength={1000}
              onInput={(e) => setMessage(e.currentTarget.value)}
              aria-invalid={messageError ? 'true' : undefined}
            />
            {messageError && (
              <small class="field-error" role="alert">
                {messageError}
              </small>
            )}
          </div>
          <button type="submit" class="primary" disabled={action.busy}>
            Commit
          </button>
        </form>
      )}
      <ErrorBox error={action.error} />
    </section>
  );
}

export function ConfigureScreen() {
  const { query } = useLocation();
  const type: EntityType = query.get('type') === 'tag' ? 'tag' : 'node';
  const id = query.get('id') ?? '';
  const bundleParam = query.get('bundle') ?? '';
  const bundle = BUNDLE_NAMES.includes(bundleParam) ? bundleParam : 'settings';
  const tree = useLoad(() => api.get<GroupTree>('/grouptree', { _format: 'json' }), []);
  const tags = useLoad(() => api.get('/tagslist').then((a) => itemsOf<string | { tag?: string; name?: string }>(a)), []);
  const changes = useLoad(() => api.get<Change[]>('/changelist'), []);
  const [notice, setNotice] = useState('');
  const [round, setRound] = useState(0);
  const names = useMemo(() => titles(tree.data?.tree), [tree.data]);
  const tagNames = (tags.data ?? []).map((t) => (typeof t === 'string' ? t : (t.tag ?? t.name ?? ''))).filter(Boolean);
  const refresh = (text: string) => {
    setNotice(text);
    changes.reload();
    setRound((n) => n + 1);
  };
  const selected = type === 'tag' ? `tag:${id}` : id;
  return (
    <section>
      <PageTitle>Configure</PageTitle>
      {allowed('configureModify') && allowed('configureFileSelector') && <FileStoreList />}
      {allowed('configureModify') && allowed('configureInventoryPopups') && type === 'node' && id && deviceIds(tree.data?.tree).has(id) && (
        <DeviceInventoryLists deviceId={id} />
      )}
      {notice && <Notice>{notice}</Notice>}
      <ErrorBox error={tree.error ?? changes.error} />
      <div class="configure-layout">
        <div>{tree.loading && !tree.data ? <Loading what="the tree" /> : <Picker tree={tree.data?.tree} tags={tagNames} selected={selected} />}</div>
        <div class="stack">
          {id ? (
            <EntityConfig
              key={`${selected}:${round}`}
              type={type}
              id={id}
              bundle={bundle}
              title={type === 'tag' ? id : (names.get(id) ?? id)}
              changes={changes.data ?? []}
              onStaged={refresh}
            />
          ) : (
            <p class="muted">Pick a group, a device or a tag to see its configuration{allowed('configureModify') ? ' and change it' : ''}.</p>
          )}
          {changes.data && <StagedChanges changes={changes.data} names={names} onChanged={refresh} />}
        </div>
      </div>
    </section>
  );
}

// ---- the device page's "Show configuration" ----

interface DeviceState {
  device_commit_sha?: string;
  config_propagated?: boolean;
}

function findNode(node: GroupTreeNode | undefined, id: string): GroupTreeNode | undefined {
  if (!node) return undefined;
  if (node.node_id === id) return node;
  for (const c of node.nodes ?? []) {
    const found = findNode(c, id);
    if (found) return found;
  }
  return undefined;
}

export function DeviceConfiguration({ deviceId }: { deviceId: string }) {
  const [shown, setShown] = useState(false);
  return (
    <div>
      <button type="button" aria-expanded={shown} onClick={() => setShown(!shown)}>
        {shown ? 'Hide configuration' : 'Show configuration'}
      </button>{' '}
      {allowed('configure') && <Link href={entityHref('node', deviceId)}>Configure this device</Link>}
      {shown && <DeviceConfigurationView deviceId={deviceId} />}
    </div>
  );
}

function DeviceConfigurationView({ deviceId }: { deviceId: string }) {
  const config = useLoad(() => api.get<RenderedConfig>(`/config/${encodeURIComponent(deviceId)}`), [deviceId]);
  const state = useLoad(
    () =>
      api
        .get<GroupTree>('/grouptree', { _format: 'json' })
        .then((t) => (findNode(t.tree, deviceId) ?? {}) as DeviceState)
        .catch(() => ({}) as DeviceState),
    [deviceId],
  );
  if (config.error) return <ErrorBox error={config.error} />;
  if (!config.data) return <Loading what="the configuration" />;
  const c = config.data.config;
  const applied = state.data?.device_commit_sha ?? '';
  return (
    <div data-testid="device-config">
      <dl class="kv">
        <dt>Commit of its configuration</dt>
        <dd>{c.commit_id ? <code>{c.commit_id.slice(0, 12)}</code> : <span class="muted">none yet</span>}</dd>
        <dt>Applied by the agent</dt>
        <dd data-testid="device-commit-sha">{applied ? <code>{applied.slice(0, 12)}</code> : <span class="muted">nothing yet</span>}</dd>
        <dt>Propagated</dt>
        <dd data-testid="config-propagated">{state.data?.config_propagated ? 'yes: the device runs its current configuration' : 'no: not applied yet'}</dd>
      </dl>
      {c.bundles.length === 0 && <p class="muted">No configuration applies to this device.</p>}
      {Object.entries(c.bundle_data).map(([bundle, data]) => (
        <details key={bundle} class="device-bundle" data-testid={`device-bundle-${bundle}`}>
          <summary>
            <strong>{bundle}</strong>
            {data.enabled === false && <span class="badge">disabled</span>} <span class="muted small">from</span> <SourceList sources={data.inherited_from} />
          </summary>
          <pre class="config-json">{pretty(maskSecrets(bundle, editable(data)))}</pre>
        </details>
      ))}
    </div>
  );
}
