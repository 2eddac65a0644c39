/**
 * One entity's configuration in the Configure area: each bundle's effective configuration and where it
 * comes from, and the editor of the entity's own bundle (a form or JSON), staged as a change.
 */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { allowed } from '../areas.js';
import { BUNDLE_FORMS, editable, maskSecrets, parseJsonObject, pretty, validate, type JsonObject } from '../config-forms.js';
import { Link } from '../router.js';
import { ErrorBox, Loading, useAction, useLoad } from '../ui.js';
import { FieldEditor } from './configure-fields.js';
import { BUNDLE_NAMES, entityHref, loadConfig, type Change, type EntityType, type Source } from './configure-model.js';

export function SourceList({ sources }: { sources: Source[] | undefined }) {
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

// ---- one bundle of one entity ----

export function BundleEditor({
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

export function EntityConfig({
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
